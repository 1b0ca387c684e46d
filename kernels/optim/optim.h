// Fused optimizer updates over one contiguous parameter buffer, in place. They are the kernels
// of the registered ops sgd_update / adam_update (cpp/flowgrad/ops/optim_ops.cpp). Hyper-
// parameters are read from a small float64 buffer on the parameter's device, and Adam's step
// counter is an int64 there too, so a compiled or captured step sees what a scheduler wrote last.
#pragma once
#include <cmath>
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/fg_hd.h"

namespace fg {

using std::pow;
using std::sqrt;

// Slots of the hyper-parameter buffers.
// maximize (PyTorch's maximize=True): the update ascends, the gradient negated before anything reads it.
enum SgdSlot : int {
  kSgdLr, kSgdMomentum, kSgdDampening, kSgdWeightDecay, kSgdNesterov, kSgdFirst, kSgdMaximize, kSgdSlots
};
enum AdamSlot : int {
  kAdamLr, kAdamBeta1, kAdamBeta2, kAdamEps, kAdamWeightDecay, kAdamDecoupled, kAdamMaximize, kAdamSlots
};

// The per-element updates, shared by the CPU loops and the CUDA kernels.
template <class T>
struct SgdCoeffs {
  T lr, wd, mu, damp;
  bool nesterov, first, maximize;
};
template <class T>
FG_HD SgdCoeffs<T> sgd_coeffs(const double* h) {  // h: (kSgdSlots,)
  return {T(h[kSgdLr]), T(h[kSgdWeightDecay]), T(h[kSgdMomentum]), T(1 - h[kSgdDampening]),
          h[kSgdNesterov] != 0, h[kSgdFirst] != 0, h[kSgdMaximize] != 0};
}
// first: the momentum buffer starts as the gradient (PyTorch's convention).
template <class T>
FG_HD void sgd_element(T& p, T g, T* buf, const SgdCoeffs<T>& c) {
  T d = (c.maximize ? -g : g) + c.wd * p;
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
  bool maximize;
};
// step: the 1-based count after this update (for bias correction).
template <class T>
FG_HD AdamCoeffs<T> adam_coeffs(const double* h, int64_t step) {  // h: (kAdamSlots,)
  const double c1 = 1 - pow(h[kAdamBeta1], static_cast<double>(step));
  const double c2 = 1 - pow(h[kAdamBeta2], static_cast<double>(step));
  const bool decoupled = h[kAdamDecoupled] != 0;
  return {T(h[kAdamBeta1]), T(h[kAdamBeta2]), T(h[kAdamEps]), T(h[kAdamLr] / c1), T(1 / sqrt(c2)),
          decoupled ? T(1 - h[kAdamLr] * h[kAdamWeightDecay]) : T(1), decoupled ? T(0) : T(h[kAdamWeightDecay]),
          h[kAdamMaximize] != 0};
}
template <class T>
FG_HD void adam_element(T& p, T g, T& m, T& v, const AdamCoeffs<T>& c) {
  T w = p * c.decay;
  T d = (c.maximize ? -g : g) + c.l2 * p;
  T mi = c.b1 * m + (T(1) - c.b1) * d;
  T vi = c.b2 * v + (T(1) - c.b2) * d * d;
  m = mi;
  v = vi;
  p = w - c.step_size * mi / (sqrt(vi) * c.inv_sqrt_c2 + c.eps);
}

// param (n) -= lr * update; momentum_buf (n, null when momentum == 0) updated in place.
// hyper: (kSgdSlots,) float64 on the same device.
void sgd_update_cpu(const KernelEnv& env, DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const double* hyper);
// Increments *step (int64, same device), then updates param, exp_avg, exp_avg_sq (n) in place.
void adam_update_cpu(const KernelEnv& env, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                     const double* hyper, int64_t* step);
// The same on CUDA device memory (CUDA builds only); every pointer is device memory.
void sgd_update_cuda(const KernelEnv& env, DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const double* hyper);
void adam_update_cuda(const KernelEnv& env, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                      const double* hyper, int64_t* step);

// Many parameters of one dtype in one call (multi-tensor apply): the same per-element updates
// as sgd_update_* / adam_update_* on each item, so the numbers are bitwise those of one call per
// item, for any number of items. CUDA launches once per kMaxMultiTensors items (its table is a
// kernel argument).
constexpr int kMaxMultiTensors = 64;
struct SgdItem {
  void* param;
  const void* grad;
  void* momentum_buf;  // null without momentum
  int64_t n;
};
struct AdamItem {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t* step;  // this parameter's counter, incremented by the call
  int64_t n;
};
void sgd_update_multi_cpu(const KernelEnv& env, DType dtype, const SgdItem* items, int count, const double* hyper);
void adam_update_multi_cpu(const KernelEnv& env, DType dtype, const AdamItem* items, int count, const double* hyper);
void sgd_update_multi_cuda(const KernelEnv& env, DType dtype, const SgdItem* items, int count, const double* hyper);
void adam_update_multi_cuda(const KernelEnv& env, DType dtype, const AdamItem* items, int count, const double* hyper);

}  // namespace fg
