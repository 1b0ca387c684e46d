// The optimizer update ops (in place; hyper-parameters and step counters are tensors on the
// parameter's device, laid out as kernels/optim/optim.h's SgdSlot / AdamSlot say).
#pragma once
#include "flowgrad/ops/registry.h"

namespace fg {

// param -= lr * update, momentum_buf (undefined when momentum is 0) in place.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& hyper, const Tensor& momentum_buf);
// ++step, then param, exp_avg, exp_avg_sq in place.
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& hyper, const Tensor& step,
                 const Tensor& exp_avg, const Tensor& exp_avg_sq);

}  // namespace fg
