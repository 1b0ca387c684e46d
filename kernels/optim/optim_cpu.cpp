#include "kernels/optim/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/common/cpu_dispatch.h"
#include "flowgrad/base/parallel.h"

namespace fg {
namespace {
// Elements per thread from which an update splits: each element streams 5 (SGD with momentum) to 7
// (Adam) values, so a slice of kParallelGrain / 8 is already tens of microseconds of memory traffic.
// (When the multi-tensor ops took at most 6 to 15 parameters per call, a compiled transformer's
// AdamW updates at kParallelGrain, 9 calls of ~87k elements, all ran on one thread.)
constexpr int64_t kUpdateGrain = kParallelGrain / 8;

// The update loops, compiled per instruction set (cpu_dispatch.h). buf may be null (no momentum).
template <class T>
FG_CPU_KERNEL void sgd_run(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const SgdCoeffs<T>& c) {
  if (!buf) {
    for (int64_t i = 0; i < n; ++i) sgd_element<T>(p[i], g[i], nullptr, c);
    return;
  }
  for (int64_t i = 0; i < n; ++i) sgd_element<T>(p[i], g[i], buf + i, c);
}
template <class T>
FG_CPU_KERNEL void adam_run(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, int64_t n,
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
    parallel_for(n, kUpdateGrain, [=](int64_t b, int64_t e) {
      FG_AT_ISA(sgd_run<T>(p + b, g + b, buf ? buf + b : nullptr, e - b, c));
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
    parallel_for(n, kUpdateGrain, [=](int64_t b, int64_t e) { FG_AT_ISA(adam_run<T>(p + b, g + b, m + b, v + b, e - b, c)); });
  });
}

// Multi-tensor updates: one parallel_for over the elements of every item (one pool dispatch per
// step), each slice running the loops above, so the numbers are those of one call per item.
// Nothing is allocated per call.
namespace {

// Calls body(k, lo, hi) for the part [lo, hi) of each item k that [b, e) of the items'
// concatenation covers.
template <class Item, class Body>
void for_slices(const Item* items, int count, int64_t b, int64_t e, Body&& body) {
  int64_t start = 0;
  for (int k = 0; k < count && start < e; ++k) {
    const int64_t end = start + items[k].n;
    if (end > b) body(k, std::max(b, start) - start, std::min(e, end) - start);
    start = end;
  }
}

template <class Item>
int64_t total_size(const Item* items, int count) {
  int64_t n = 0;
  for (int k = 0; k < count; ++k) n += items[k].n;
  return n;
}

}  // namespace

void sgd_update_multi_cpu(const KernelEnv& env, DType dtype, const SgdItem* items, int count, const double* hyper) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    const SgdCoeffs<T> c = sgd_coeffs<T>(hyper);
    parallel_for(total_size(items, count), kUpdateGrain, [&](int64_t b, int64_t e) {
      for_slices(items, count, b, e, [&](int k, int64_t lo, int64_t hi) {
        const SgdItem& it = items[k];
        T* buf = static_cast<T*>(it.momentum_buf);
        FG_AT_ISA(sgd_run<T>(static_cast<T*>(it.param) + lo, static_cast<const T*>(it.grad) + lo, buf ? buf + lo : nullptr,
                   hi - lo, c));
      });
    });
  });
}

void adam_update_multi_cpu(const KernelEnv& env, DType dtype, const AdamItem* items, int count, const double* hyper) {
  for (int k = 0; k < count; ++k) ++*items[k].step;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    parallel_for(total_size(items, count), kUpdateGrain, [&](int64_t b, int64_t e) {
      for_slices(items, count, b, e, [&](int k, int64_t lo, int64_t hi) {
        const AdamItem& it = items[k];
        FG_AT_ISA(adam_run<T>(static_cast<T*>(it.param) + lo, static_cast<const T*>(it.grad) + lo,
                    static_cast<T*>(it.exp_avg) + lo, static_cast<T*>(it.exp_avg_sq) + lo, hi - lo,
                    adam_coeffs<T>(hyper, *it.step)));
      });
    });
  });
}

}  // namespace fg
