#include "kernels/optim/optim.h"

#include <cmath>

#include "kernels/common/parallel.h"

namespace fg {
namespace {

template <class Fn>
void visit_float(DType dt, Fn&& fn) {
  if (dt == DType::Float32) return fn(float{});
  if (dt == DType::Float64) return fn(double{});
  fail(ErrorKind::DType, "optimizer: parameters must be float32 or float64, got ", dtype_name(dt));
}

}  // namespace

void sgd_update_cpu(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                    const SgdHyper& h, bool first) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buf);
    const T lr = T(h.lr), wd = T(h.weight_decay), mu = T(h.momentum), damp = T(1 - h.dampening);
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T d = g[i] + wd * p[i];
        if (buf) {
          buf[i] = first ? d : mu * buf[i] + damp * d;
          d = h.nesterov ? d + mu * buf[i] : buf[i];
        }
        p[i] -= lr * d;
      }
    });
  });
}

void adam_update_cpu(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                     int64_t n, const AdamHyper& h, int64_t step) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    const double c1 = 1 - std::pow(h.beta1, static_cast<double>(step));
    const double c2 = 1 - std::pow(h.beta2, static_cast<double>(step));
    const T b1 = T(h.beta1), b2 = T(h.beta2), eps = T(h.eps), wd = T(h.weight_decay);
    const T step_size = T(h.lr / c1), inv_sqrt_c2 = T(1 / std::sqrt(c2));
    const T decay = T(1 - h.lr * h.weight_decay);
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T d = g[i];
        if (h.decoupled) p[i] *= decay;
        else d += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * d;
        v[i] = b2 * v[i] + (1 - b2) * d * d;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
      }
    });
  });
}

double sum_squares_cpu(DType dtype, const void* x, int64_t n) {
  double total = 0;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  });
  return total;
}

}  // namespace fg
