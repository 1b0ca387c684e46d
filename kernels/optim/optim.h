// Fused optimizer updates over one contiguous parameter buffer, in place. The multi-tensor
// driver (cpp/flowgrad/optim) calls these for every parameter of a group in one C++ call.
#pragma once
#include <cmath>
#include <cstdint>

#include "flowgrad/core/dtype.h"
#include "kernels/common/fg_hd.h"

namespace fg {

using std::sqrt;

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};
// param (n) -= lr * update; momentum_buf (n, may be null when momentum == 0) is updated in
// place; first: the buffer starts as the gradient (PyTorch's convention).
void sgd_update_cpu(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                    const SgdHyper& h, bool first);

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW: decay the weights directly instead of adding wd * p to the gradient
};
// step is the 1-based step count after this update (for bias correction).
void adam_update_cpu(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                     int64_t n, const AdamHyper& h, int64_t step);

// The per-element updates, shared by the CPU loops and the CUDA kernels.
template <class T>
struct SgdCoeffs {
  T lr, wd, mu, damp;
  bool nesterov, first;
};
template <class T>
FG_HD void sgd_element(T& p, T g, T* buf, const SgdCoeffs<T>& c) {
  T d = g + c.wd * p;
  if (!buf) {
    p -= c.lr * d;
    return;
  }
  T mom = c.first ? d : c.mu * *buf + c.damp * d;
  *buf = mom;
  p -= c.lr * (c.nesterov ? d + c.mu * mom : mom);
}

// AdamW scales the weights (decay); Adam adds l2 * p to the gradient. Both as plain
// coefficients, so the CPU loop has no branch and vectorises.
template <class T>
struct AdamCoeffs {
  T b1, b2, eps, step_size, inv_sqrt_c2, decay, l2;
};
template <class T>
AdamCoeffs<T> adam_coeffs(const AdamHyper& h, int64_t step);
template <class T>
FG_HD void adam_element(T& p, T g, T& m, T& v, const AdamCoeffs<T>& c) {
  T w = p * c.decay;
  T d = g + c.l2 * p;
  T mi = c.b1 * m + (T(1) - c.b1) * d;
  T vi = c.b2 * v + (T(1) - c.b2) * d * d;
  m = mi;
  v = vi;
  p = w - c.step_size * mi / (sqrt(vi) * c.inv_sqrt_c2 + c.eps);
}

// The same on CUDA device memory (CUDA builds only).
void sgd_update_cuda(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                     const SgdHyper& h, bool first);
void adam_update_cuda(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                      int64_t n, const AdamHyper& h, int64_t step);

// Sum of squares of a contiguous buffer, in double.
double sum_squares_cpu(DType dtype, const void* x, int64_t n);

}  // namespace fg
