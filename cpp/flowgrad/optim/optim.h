// Multi-tensor optimizer steps: one call updates every parameter of a group in place (under
// no_grad), reading each parameter's .grad. State lives in tensors the caller owns, so that a
// compiled plan can own them later. Parameters without a gradient are skipped.
#pragma once
#include "flowgrad/ops/registry.h"
#include "kernels/optim/optim.h"

namespace fg::optim {

// momentum_bufs[i] is undefined until the first step (then created here and returned).
Tensors sgd_step(const Tensors& params, Tensors momentum_bufs, const SgdHyper& h);
// steps[i] is a 0-d int64 tensor counting parameter i's updates.
void adam_step(const Tensors& params, const Tensors& exp_avgs, const Tensors& exp_avg_sqs,
               const Tensors& steps, const AdamHyper& h);
// Scales the gradients so their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm(const Tensors& params, double max_norm);

}  // namespace fg::optim
