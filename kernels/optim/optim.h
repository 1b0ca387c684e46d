// Fused optimizer updates over one contiguous parameter buffer, in place. The multi-tensor
// driver (cpp/flowgrad/optim) calls these for every parameter of a group in one C++ call.
#pragma once
#include <cstdint>

#include "flowgrad/core/dtype.h"

namespace fg {

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

// Sum of squares of a contiguous buffer, in double.
double sum_squares_cpu(DType dtype, const void* x, int64_t n);

}  // namespace fg
