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

template <class T>
AdamCoeffs<T> adam_coeffs(const AdamHyper& h, int64_t step) {
  const double c1 = 1 - std::pow(h.beta1, static_cast<double>(step));
  const double c2 = 1 - std::pow(h.beta2, static_cast<double>(step));
  return {T(h.beta1), T(h.beta2), T(h.eps), T(h.lr / c1), T(1 / std::sqrt(c2)),
          h.decoupled ? T(1 - h.lr * h.weight_decay) : T(1), h.decoupled ? T(0) : T(h.weight_decay)};
}
template AdamCoeffs<float> adam_coeffs<float>(const AdamHyper&, int64_t);
template AdamCoeffs<double> adam_coeffs<double>(const AdamHyper&, int64_t);

void sgd_update_cpu(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                    const SgdHyper& h, bool first) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buf);
    const SgdCoeffs<T> c{T(h.lr), T(h.weight_decay), T(h.momentum), T(1 - h.dampening), h.nesterov, first};
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) {
      sgd_run<T>(p + b, g + b, buf ? buf + b : nullptr, e - b, c);
    });
  });
}

void adam_update_cpu(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                     int64_t n, const AdamHyper& h, int64_t step) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    const AdamCoeffs<T> c = adam_coeffs<T>(h, step);
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
