#include "flowgrad/core/dims.h"

#include <limits>

namespace fg {

std::string to_string(const Dims& d) {
  std::string s = "(";
  for (int i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i]);
  }
  if (d.size() == 1) s += ",";
  return s + ")";
}

Dims contiguous_strides(const Dims& shape) {
  Dims strides = Dims::filled(shape.size(), 1);
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = acc;
    acc *= shape[i] > 1 ? shape[i] : 1;
  }
  return strides;
}

int64_t checked_numel(const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    FG_CHECK(s >= 0, Shape, "negative dimension ", s, " in shape ", to_string(shape));
    FG_CHECK(s == 0 || n <= std::numeric_limits<int64_t>::max() / s, OutOfMemory,
             "shape ", to_string(shape), " has more elements than fit in 64 bits");
    n *= s;
  }
  return n;
}

int wrap_dim(int64_t dim, int rank, const char* op, ScalarDim scalar) {
  FG_CHECK(rank > 0 || scalar == ScalarDim::AsSingleElement, Index, op, ": dim ", dim,
           " is out of range for a 0-d tensor (it has no dims)");
  int64_t r = rank == 0 ? 1 : rank;
  FG_CHECK(dim >= -r && dim < r, Index, op, ": dim ", dim, " is out of range for a tensor of ",
           rank, " dimension(s) (expected ", -r, " <= dim < ", r, ")");
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

}  // namespace fg
