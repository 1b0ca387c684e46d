// x[items]: basic indexing becomes views (select, slice, unsqueeze); an integer index tensor
// becomes index_select and a bool mask becomes nonzero + index_select. x[items] = value writes
// the elements that x[items] reads, found by indexing their positions the same way.
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"

namespace fg {
namespace {

using Kind = IndexItem::Kind;

int dims_consumed(const IndexItem& item) {
  switch (item.kind) {
    case Kind::Int:
    case Kind::Slice: return 1;
    case Kind::Tensor: return item.tensor.dtype() == DType::Bool ? std::max(1, item.tensor.ndim()) : 1;
    default: return 0;
  }
}

Tensor slice_item(const Tensor& x, int dim, const IndexItem& item) {
  int64_t size = x.shape()[dim];
  int64_t step = item.step.value_or(1);
  FG_CHECK(step > 0, Value, "index: slice steps must be positive, got ", step);
  return slice(x, dim, item.start.value_or(0), item.stop.value_or(size), step);
}

// Integer tensor along dim: the result has the index's shape in place of dim.
Tensor take(const Tensor& x, int dim, const Tensor& idx) {
  Tensor picked = index_select(x, dim, reshape(idx, {-1}));
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + dim);
  shape.insert(shape.end(), idx.shape().begin(), idx.shape().end());
  shape.insert(shape.end(), x.shape().begin() + dim + 1, x.shape().end());
  return reshape(picked, shape);
}

// Bool mask over dims [dim, dim + mask.ndim): those dims collapse into one of the true count.
Tensor mask_select(const Tensor& x, int dim, const Tensor& mask) {
  int m = std::max(1, mask.ndim());
  for (int i = 0; i < mask.ndim(); ++i)
    FG_CHECK(mask.shape()[i] == x.shape()[dim + i], Shape, "index: bool mask ", to_string(mask.shape()),
             " does not match tensor ", to_string(x.shape()), " at dim ", dim + i);
  Tensor flat_x = x;
  if (mask.ndim() != 1) flat_x = flatten(x, dim, dim + m - 1);
  Tensor positions = nonzero(reshape(mask, {-1}));  // (count, 1)
  return index_select(flat_x, dim, reshape(positions, {-1}));
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<IndexItem>& items) {
  int consumed = 0, ellipses = 0, tensors = 0;
  for (const IndexItem& item : items) {
    consumed += dims_consumed(item);
    ellipses += item.kind == Kind::Ellipsis;
    tensors += item.kind == Kind::Tensor;
  }
  FG_CHECK(ellipses <= 1, Index, "index: an index can only have a single ellipsis ('...')");
  FG_CHECK(tensors <= 1, Index, "index: at most one index tensor per indexing expression is supported");
  FG_CHECK(consumed <= x.ndim(), Index, "index: too many indices for a tensor of ", x.ndim(),
           " dims (", consumed, " given)");
  Tensor out = x;
  int dim = 0;
  for (const IndexItem& item : items) {
    switch (item.kind) {
      case Kind::Int: out = select(out, dim, item.index); break;
      case Kind::Slice: out = slice_item(out, dim, item); ++dim; break;
      case Kind::NewAxis: out = unsqueeze(out, dim); ++dim; break;
      case Kind::Ellipsis: dim += x.ndim() - consumed; break;
      case Kind::Tensor:
        if (item.tensor.dtype() == DType::Bool) {
          out = mask_select(out, dim, item.tensor);
          ++dim;
        } else {
          FG_CHECK(is_integral(item.tensor.dtype()), DType, "index: index tensors must be integer ",
                   "or bool, got ", describe(item.tensor));
          out = take(out, dim, item.tensor);
          dim += item.tensor.ndim();
        }
        break;
    }
  }
  return out;
}

namespace {

// The row-major numbers of the elements of a tensor of `shape` that index(x, items) reads, as an
// int64 tensor of the indexed shape, computed on the host. An index tensor or mask reads the
// numbers from one arange; basic indexing sums coordinate * stride over dims, each term indexed
// from a broadcast arange, so only the indexed elements are materialised (t[0] = v costs the
// size of t[0], not of t).
Tensor index_positions(const Dims& shape, std::vector<IndexItem> items) {
  Device host = cpu_device();
  bool basic = true;
  for (IndexItem& item : items) {
    if (item.kind != Kind::Tensor) continue;
    item.tensor = raw::device_copy(item.tensor, host);
    basic = false;
  }
  if (!basic || shape.size() == 0)
    return index(reshape(arange(0, static_cast<double>(shape.numel()), 1, DType::Int64, host), shape.vec()), items);
  Dims strides = contiguous_strides(shape);
  Tensor positions;
  for (int d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> along(shape.size(), 1);
    along[d] = shape[d];
    Tensor coordinate = reshape(arange(0, shape[d], 1, DType::Int64, host) * static_cast<double>(strides[d]), along);
    Tensor term = index(expand(coordinate, shape.vec()), items);
    positions = positions.defined() ? positions + term : contiguous(term);
  }
  return positions;
}

}  // namespace

// PyTorch's rule for t[index] = value: value broadcasts to the indexed shape after its leading
// size-1 dims beyond that shape's rank are dropped (a (1, n) value fills an (n,) row).
Tensor assign_index(const Tensor& x, const std::vector<IndexItem>& items, const Tensor& value) {
  Tensor positions = raw::device_copy(index_positions(x.shape(), items), x.device());
  int extra = 0;
  while (value.ndim() - extra > positions.ndim() && value.shape()[extra] == 1) ++extra;
  if (extra == 0) return index_put_(x, positions, value);
  std::vector<int64_t> kept(value.shape().begin() + extra, value.shape().end());
  return index_put_(x, positions, reshape(value, kept));
}

}  // namespace fg
