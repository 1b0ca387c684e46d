// Dims: a shape or stride list stored inline (no heap), at most kMaxRank entries.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "flowgrad/base/errors.h"

namespace fg {

class Dims {
 public:
  static constexpr int kMaxRank = 8;

  Dims() = default;
  Dims(std::initializer_list<int64_t> values) {
    for (int64_t v : values) push_back(v);
  }
  explicit Dims(const std::vector<int64_t>& values) {
    for (int64_t v : values) push_back(v);
  }
  static Dims filled(int rank, int64_t value) {
    Dims d;
    for (int i = 0; i < rank; ++i) d.push_back(value);
    return d;
  }

  int size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t operator[](int i) const { return values_[i]; }
  int64_t& operator[](int i) { return values_[i]; }
  int64_t back() const { return values_[rank_ - 1]; }
  const int64_t* begin() const { return values_.data(); }
  const int64_t* end() const { return values_.data() + rank_; }
  int64_t* data() { return values_.data(); }
  const int64_t* data() const { return values_.data(); }

  void push_back(int64_t v) {
    FG_CHECK(rank_ < kMaxRank, Shape, "tensors have at most ", kMaxRank, " dimensions");
    values_[rank_++] = v;
  }
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = rank_ - 1; i > pos; --i) values_[i] = values_[i - 1];
    values_[pos] = v;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < rank_; ++i) values_[i] = values_[i + 1];
    --rank_;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  bool operator==(const Dims& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (values_[i] != o.values_[i]) return false;
    return true;
  }
  bool operator!=(const Dims& o) const { return !(*this == o); }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= values_[i];
    return n;
  }

 private:
  std::array<int64_t, kMaxRank> values_;  // entries past rank_ are never read
  int rank_ = 0;
};

std::string to_string(const Dims& d);           // "(2, 3)"
Dims contiguous_strides(const Dims& shape);     // row-major element strides
int64_t checked_numel(const Dims& shape);       // raises on negative sizes or overflow
// What a dim of a 0-d tensor means to an op. Shape ops have no dim to index: Reject raises
// IndexOutOfRangeError. Reductions, softmax, sort and gather see the one element as a line along
// dim 0 (or -1), as NumPy reductions and PyTorch do: AsSingleElement returns 0, which the caller
// must then not use to index the (empty) shape.
enum class ScalarDim { Reject, AsSingleElement };
// Normalises a possibly negative dim against a rank; `op` names the caller in errors.
int wrap_dim(int64_t dim, int rank, const char* op, ScalarDim scalar = ScalarDim::Reject);

}  // namespace fg
