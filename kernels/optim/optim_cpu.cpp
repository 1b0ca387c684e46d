#include "kernels/optim/optim.h"

#include <cmath>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/parallel.h"

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

void sgd_update_cpu(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const double* hyper) {
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

void adam_update_cpu(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
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

double sum_squares_cpu(DType dtype, const void* x, int64_t n) {
  double total = 0;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  });
  return total;
}

}  // namespace fg
