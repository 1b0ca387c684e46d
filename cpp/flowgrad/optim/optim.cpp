#include "flowgrad/optim/optim.h"

#include <cmath>
#include <cstring>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/ops/optim_ops.h"
#include "flowgrad/cuda/runtime.h"
#include "kernels/optim/optim.h"

namespace fg::optim {

std::span<const char* const> sgd_slots() {
  static constexpr const char* names[] = {"lr",       "momentum", "dampening", "weight_decay",
                                          "nesterov", "first",    "maximize"};
  static_assert(std::size(names) == kSgdSlots, "one name per SgdSlot");
  return names;
}
std::span<const char* const> adam_slots() {
  static constexpr const char* names[] = {"lr", "beta1", "beta2", "eps", "weight_decay", "decoupled", "maximize"};
  static_assert(std::size(names) == kAdamSlots, "one name per AdamSlot");
  return names;
}

namespace {

// The gradient of p with p's dtype and layout (through ops, so a tracer sees any conversion),
// or undefined when p has none.
Tensor grad_for(const Tensor& p) {
  Tensor g = grad_of(p);
  if (!g.defined()) return g;
  FG_CHECK(g.shape() == p.shape(), Shape, "optimizer: gradient ", describe(g), " does not match parameter ",
           describe(p));
  return contiguous(cast(g, p.dtype()));
}

}  // namespace

namespace {

// Whether the multi-tensor ops may take these parameters: one device and one dtype.
bool uniform(const Tensors& params) {
  for (const Tensor& p : params)
    if (p.device() != params[0].device() || p.dtype() != params[0].dtype()) return false;
  return !params.empty();
}

// The update kernels write contiguous memory: a strided parameter (a transposed weight) is updated
// through a contiguous copy of it (its state is contiguous too), which write_back copies into it.
struct Strided {
  Tensors params, copies;

  Tensor operator()(const Tensor& p) {
    if (p.is_contiguous()) return p;
    params.push_back(p);
    copies.push_back(contiguous(p));
    return copies.back();
  }
  void write_back() const {
    for (size_t i = 0; i < params.size(); ++i) copy_(params[i], copies[i]);
  }
};

}  // namespace

void sgd_step(const Tensors& params, const Tensors& bufs, const Tensor& hyper, UpdateMode mode) {
  FG_CHECK(bufs.empty() || bufs.size() == params.size(), Value, "SGD: ", bufs.size(),
           " momentum buffers for ", params.size(), " parameters");
  GradModeGuard no_grad(false);
  Strided strided;
  Tensors with_grad, groups;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = grad_for(params[i]);
    if (!g.defined()) continue;
    Tensor p = strided(params[i]);
    if (mode == UpdateMode::PerParameter) {
      sgd_update(p, g, hyper, bufs.empty() ? Tensor() : bufs[i]);
      continue;
    }
    with_grad.push_back(p);
    groups.insert(groups.end(), {p, g});
    if (!bufs.empty()) groups.push_back(bufs[i]);
  }
  const size_t per = bufs.empty() ? 2 : 3;
  if (uniform(with_grad)) {
    sgd_update_multi(hyper, groups, !bufs.empty());
  } else {  // mixed devices or dtypes (or none): one op per parameter
    for (size_t i = 0; i < groups.size(); i += per)
      sgd_update(groups[i], groups[i + 1], hyper, per == 3 ? groups[i + 2] : Tensor());
  }
  strided.write_back();
}

void adam_step(const Tensors& params, const Tensors& exp_avgs, const Tensors& exp_avg_sqs,
               const Tensors& steps, const Tensor& hyper, UpdateMode mode) {
  FG_CHECK(exp_avgs.size() == params.size() && exp_avg_sqs.size() == params.size() && steps.size() == params.size(),
           Value, "Adam: state lists must match the parameter list");
  GradModeGuard no_grad(false);
  Strided strided;
  Tensors with_grad, groups;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = grad_for(params[i]);
    if (!g.defined()) continue;
    Tensor p = strided(params[i]);
    if (mode == UpdateMode::PerParameter) {
      adam_update(p, g, hyper, steps[i], exp_avgs[i], exp_avg_sqs[i]);
      continue;
    }
    with_grad.push_back(p);
    groups.insert(groups.end(), {p, g, steps[i], exp_avgs[i], exp_avg_sqs[i]});
  }
  if (uniform(with_grad)) {
    adam_update_multi(hyper, groups);
  } else {  // mixed devices or dtypes (or none): one op per parameter
    for (size_t i = 0; i < groups.size(); i += 5)
      adam_update(groups[i], groups[i + 1], hyper, groups[i + 2], groups[i + 3], groups[i + 4]);
  }
  strided.write_back();
}

void write_hyper(const Tensor& hyper, const std::vector<double>& values) {
  FG_CHECK(hyper.dtype() == DType::Float64 && hyper.is_contiguous() && hyper.numel() == static_cast<int64_t>(values.size()),
           Value, "optimizer: hyper-parameter tensor ", describe(hyper), " cannot hold ", values.size(), " values");
  size_t bytes = values.size() * sizeof(double);
  if (hyper.device().is_cpu())
    std::memcpy(hyper.data_ptr(), values.data(), bytes);
  else
    cuda::copy_to_device_async(hyper.data_ptr(), hyper.device(), values.data(), bytes);  // no host wait
}

Tensor clip_grad_norm(const Tensors& params, double max_norm) {
  FG_CHECK(max_norm > 0, Value, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  GradModeGuard no_grad(false);
  Tensor total;  // the sum of squares in float64 on the first gradient's device
  for (const Tensor& p : params) {
    Tensor g = grad_of(p);
    if (!g.defined()) continue;
    Tensor part = sum(square(cast(g, DType::Float64)), Dims{}, false);
    total = total.defined() ? add(total, to_device(part, total.device())) : part;
  }
  if (!total.defined()) return scalar_tensor(0.0, DType::Float32, Device{});
  Tensor norm = sqrt(total);
  // 1 when the norm is within bounds: g * 1 keeps every gradient as it was
  Tensor factor = clamp(div(scalar_like(norm, max_norm), norm + 1e-6), std::nullopt, 1.0);
  for (const Tensor& p : params) {
    Tensor g = grad_of(p);
    if (g.defined()) set_grad(p, mul(g, to_device(cast(factor, g.dtype()), g.device())));  // out of place: a grad may share memory with a view
  }
  return cast(norm, DType::Float32);
}

}  // namespace fg::optim
