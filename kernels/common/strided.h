// Strided iteration over N operands that share one index space (broadcast operands have
// stride 0). Dims are coalesced first, so contiguous operands collapse to one flat run.
#pragma once
#include <cstdint>

#include "flowgrad/base/parallel.h"

namespace fg {

constexpr int kMaxDims = 8;

// Only the first ndim entries of shape/strides are meaningful (the rest stay uninitialised:
// this is built for every elementwise op call).
template <int N>
struct Strided {
  int ndim = 0;
  int64_t shape[kMaxDims];
  char* data[N];
  int64_t strides[N][kMaxDims];  // bytes

  // Drops size-1 dims and merges neighbours that are contiguous in every operand.
  void coalesce() {
    int out = 0;
    for (int d = 0; d < ndim; ++d) {
      if (shape[d] == 1) continue;
      if (out > 0) {
        bool mergeable = true;
        for (int k = 0; k < N; ++k)
          mergeable &= strides[k][out - 1] == strides[k][d] * shape[d];
        if (mergeable) {
          shape[out - 1] *= shape[d];
          for (int k = 0; k < N; ++k) strides[k][out - 1] = strides[k][d];
          continue;
        }
      }
      shape[out] = shape[d];
      for (int k = 0; k < N; ++k) strides[k][out] = strides[k][d];
      ++out;
    }
    ndim = out;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
};

// Calls run(ptrs, inner_strides, n) for each innermost run of the (coalesced) index space,
// in parallel over rows (or over chunks of a single flat run).
template <int N, class Run>
void for_each_run(Strided<N> s, int64_t grain, Run&& run) {
  s.coalesce();
  int64_t total = s.numel();
  if (total == 0) return;
  if (s.ndim == 0) {  // a single element
    int64_t zero[N] = {};
    run(s.data, zero, int64_t{1});
    return;
  }
  int last = s.ndim - 1;
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = s.strides[k][last];
  if (s.ndim == 1) {
    parallel_for(total, grain, [&](int64_t begin, int64_t end) {
      char* ptrs[N];
      for (int k = 0; k < N; ++k) ptrs[k] = s.data[k] + begin * inner[k];
      run(ptrs, inner, end - begin);
    });
    return;
  }
  int64_t rows = total / s.shape[last];
  int64_t row_grain = grain / s.shape[last] + 1;
  parallel_for(rows, row_grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      char* ptrs[N];
      for (int k = 0; k < N; ++k) ptrs[k] = s.data[k];
      int64_t rest = row;
      for (int d = last - 1; d >= 0; --d) {
        int64_t i = rest % s.shape[d];
        rest /= s.shape[d];
        for (int k = 0; k < N; ++k) ptrs[k] += i * s.strides[k][d];
      }
      run(ptrs, inner, s.shape[last]);
    }
  });
}

}  // namespace fg
