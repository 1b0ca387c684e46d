// Multi-tensor optimizer steps: one call updates every parameter of a group in place (under
// no_grad), reading each parameter's .grad, through the update ops (per parameter or multi-
// tensor) so a compile tracer records them. State and hyper-parameters live in tensors the caller owns.
// Parameters without a gradient are skipped.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "flowgrad/ops/registry.h"

namespace fg::optim {

// How a step runs its updates: one op per parameter, or multi-tensor ops over all of them (few
// launches, the same numbers) when the parameters share one device and dtype.
enum class UpdateMode : uint8_t { PerParameter, MultiTensor };

// The names of the hyper-parameter slots, in the order the update kernels read them
// (kernels/optim/optim.h SgdSlot / AdamSlot): fg.optim writes each step's values by these names.
std::span<const char* const> sgd_slots();
std::span<const char* const> adam_slots();

// momentum_bufs: empty when momentum is 0, else one buffer per parameter.
// hyper: float64 (kSgdSlots,) on the parameters' device.
void sgd_step(const Tensors& params, const Tensors& momentum_bufs, const Tensor& hyper,
              UpdateMode mode = UpdateMode::MultiTensor);
// steps[i]: a one-element int64 tensor counting parameter i's updates, on its device.
// hyper: float64 (kAdamSlots,) on the parameters' device.
void adam_step(const Tensors& params, const Tensors& exp_avgs, const Tensors& exp_avg_sqs,
               const Tensors& steps, const Tensor& hyper, UpdateMode mode = UpdateMode::MultiTensor);
// Writes host values into a hyper-parameter tensor (on any device).
void write_hyper(const Tensor& hyper, const std::vector<double>& values);
// Scales the gradients so their global L2 norm is at most max_norm; returns the norm before (0-d
// float32 on the first gradient's device). All ops, no host read: a compiled step records them.
Tensor clip_grad_norm(const Tensors& params, double max_norm);

}  // namespace fg::optim
