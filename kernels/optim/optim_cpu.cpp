#include "kernels/optim/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/cpu_dispatch.h"
#include "flowgrad/base/parallel.h"

namespace fg {
namespace {
// The update loops, compiled per instruction set (cpu_dispatch.h). buf may be null (no momentum).
template <class T>
FG_CPU_CLONES void sgd_run(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const SgdCoeffs<T>& c) {
  if (!buf) {
    for (int64_t i = 0; i < n; ++i) sgd_element<T>(p[i], g[i], nullptr, c);
    return;
  }
  for (int64_t i = 0; i < n; ++i) sgd_element<T>(p[i], g[i], buf + i, c);
}
template <class T>
FG_CPU_CLONES void adam_run(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, int64_t n,
                            const AdamCoeffs<T>& c) {
  for (int64_t i = 0; i < n; ++i) adam_element<T>(p[i], g[i], m[i], v[i], c);
}
}  // namespace

void sgd_update_cpu(const KernelEnv& env, DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const double* hyper) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buf);
    const SgdCoeffs<T> c = sgd_coeffs<T>(hyper);
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) {
      sgd_run<T>(p + b, g + b, buf ? buf + b : nullptr, e - b, c);
    });
  });
}

void adam_update_cpu(const KernelEnv& env, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                     const double* hyper, int64_t* step) {
  const int64_t count = ++*step;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    const AdamCoeffs<T> c = adam_coeffs<T>(hyper, count);
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) { adam_run<T>(p + b, g + b, m + b, v + b, e - b, c); });
  });
}

// Multi-tensor updates: one parallel_for over the elements of every item (one pool dispatch per
// step), each slice running the loops above, so the numbers are those of one call per item.
namespace {

// Calls body(item, begin, end) for the slices of the items that [b, e) of their concatenation
// covers. starts: prefix sums of the item sizes (count + 1 entries).
template <class Body>
void for_slices(const std::vector<int64_t>& starts, int64_t b, int64_t e, Body&& body) {
  size_t k = 0;
  while (starts[k + 1] <= b) ++k;
  for (; k + 1 < starts.size() && starts[k] < e; ++k)
    body(k, std::max(b, starts[k]) - starts[k], std::min(e, starts[k + 1]) - starts[k]);
}

template <class Item>
std::vector<int64_t> prefix_sizes(const Item* items, int count) {
  std::vector<int64_t> starts(count + 1, 0);
  for (int i = 0; i < count; ++i) starts[i + 1] = starts[i] + items[i].n;
  return starts;
}

}  // namespace

void sgd_update_multi_cpu(const KernelEnv& env, DType dtype, const SgdItem* items, int count, const double* hyper) {
  std::vector<int64_t> starts = prefix_sizes(items, count);
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    const SgdCoeffs<T> c = sgd_coeffs<T>(hyper);
    parallel_for(starts.back(), kParallelGrain, [&](int64_t b, int64_t e) {
      for_slices(starts, b, e, [&](size_t k, int64_t lo, int64_t hi) {
        const SgdItem& it = items[k];
        T* buf = static_cast<T*>(it.momentum_buf);
        sgd_run<T>(static_cast<T*>(it.param) + lo, static_cast<const T*>(it.grad) + lo, buf ? buf + lo : nullptr,
                   hi - lo, c);
      });
    });
  });
}

void adam_update_multi_cpu(const KernelEnv& env, DType dtype, const AdamItem* items, int count, const double* hyper) {
  std::vector<int64_t> starts = prefix_sizes(items, count);
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    std::vector<AdamCoeffs<T>> coeffs;
    for (int k = 0; k < count; ++k) coeffs.push_back(adam_coeffs<T>(hyper, ++*items[k].step));
    parallel_for(starts.back(), kParallelGrain, [&](int64_t b, int64_t e) {
      for_slices(starts, b, e, [&](size_t k, int64_t lo, int64_t hi) {
        const AdamItem& it = items[k];
        const AdamCoeffs<T> c = coeffs[k];
        adam_run<T>(static_cast<T*>(it.param) + lo, static_cast<const T*>(it.grad) + lo,
                    static_cast<T*>(it.exp_avg) + lo, static_cast<T*>(it.exp_avg_sq) + lo, hi - lo, c);
      });
    });
  });
}

}  // namespace fg
