#include "kernels/optim/optim.h"

#include <cmath>

#include "kernels/common/parallel.h"

namespace fg {
void sgd_update_cpu(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                    const SgdHyper& h, bool first) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buf);
    const T lr = T(h.lr), wd = T(h.weight_decay), mu = T(h.momentum), damp = T(1 - h.dampening);
    const bool nesterov = h.nesterov;
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) {
      T* __restrict pp = p;
      const T* __restrict gg = g;
      T* __restrict bb = buf;
      if (!bb) {
        for (int64_t i = b; i < e; ++i) pp[i] -= lr * (gg[i] + wd * pp[i]);
        return;
      }
      for (int64_t i = b; i < e; ++i) {
        T d = gg[i] + wd * pp[i];
        T mom = first ? d : mu * bb[i] + damp * d;
        bb[i] = mom;
        pp[i] -= lr * (nesterov ? d + mu * mom : mom);
      }
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
    const double c1 = 1 - std::pow(h.beta1, static_cast<double>(step));
    const double c2 = 1 - std::pow(h.beta2, static_cast<double>(step));
    const T b1 = T(h.beta1), b2 = T(h.beta2), eps = T(h.eps), wd = T(h.weight_decay);
    const T step_size = T(h.lr / c1), inv_sqrt_c2 = T(1 / std::sqrt(c2));
    // AdamW scales the weights; Adam adds wd * p to the gradient. Both as plain coefficients,
    // so the loop has no branch and vectorises.
    const T decay = h.decoupled ? T(1 - h.lr * h.weight_decay) : T(1);
    const T l2 = h.decoupled ? T(0) : wd;
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) {
      T* __restrict pp = p;
      T* __restrict mm = m;
      T* __restrict vv = v;
      const T* __restrict gg = g;
      for (int64_t i = b; i < e; ++i) {
        T w = pp[i] * decay;
        T d = gg[i] + l2 * pp[i];
        T mi = b1 * mm[i] + (1 - b1) * d;
        T vi = b2 * vv[i] + (1 - b2) * d * d;
        mm[i] = mi;
        vv[i] = vi;
        pp[i] = w - step_size * mi / (std::sqrt(vi) * inv_sqrt_c2 + eps);
      }
    });
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
