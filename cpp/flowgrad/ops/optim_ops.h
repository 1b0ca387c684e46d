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
// The same updates for many parameters of one dtype and device in one call (multi-tensor
// apply) and the numbers of the calls above. groups: per parameter, sgd_update's inputs without
// hyper (param, grad [, momentum_buf]) or adam_update's (param, grad, step, exp_avg, exp_avg_sq).
void sgd_update_multi(const Tensor& hyper, const Tensors& groups, bool momentum);
void adam_update_multi(const Tensor& hyper, const Tensors& groups);

}  // namespace fg
