#include "flowgrad/optim/optim.h"

#include <cmath>
#include <type_traits>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/ops/kernel_args.h"
#include "flowgrad/ops/ops.h"

namespace fg::optim {
namespace {

// The update kernel for p's device (the CUDA one exists in CUDA builds only).
template <class Fn>
Fn kernel_for(const Tensor& p, Fn cpu, std::type_identity_t<Fn> cuda, const char* op) {
  if (p.device().is_cpu()) return cpu;
  FG_CHECK(cuda, Device, op, ": no kernel for ", p.device().str(), " in this build");
  return cuda;
}

// The gradient of p as a contiguous tensor of p's dtype, or undefined when p has none (then p
// is left alone). A parameter that will be updated must be writable.
Tensor grad_for(const Tensor& p, const char* op) {
  Tensor g = grad_of(p);
  if (!g.defined()) return g;
  check_writable(p, op);
  FG_CHECK(p.is_contiguous(), Value, op, ": parameters must be contiguous, got ", describe(p));
  FG_CHECK(g.shape() == p.shape(), Shape, op, ": gradient ", describe(g), " does not match parameter ", describe(p));
  return contiguous_raw(converted(g, p.dtype()));
}

void check_state(const Tensor& s, const Tensor& p, const char* op) {
  FG_CHECK(s.defined() && s.shape() == p.shape() && s.dtype() == p.dtype() && s.is_contiguous(), Value, op,
           ": optimizer state ", s.defined() ? describe(s) : "undefined", " does not match parameter ", describe(p));
  check_writable(s, op);
}

}  // namespace

Tensors sgd_step(const Tensors& params, Tensors bufs, const SgdHyper& h) {
  bufs.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor g = grad_for(p, "SGD");
    if (!g.defined()) continue;
    bool first = false;
    if (h.momentum != 0 && !bufs[i].defined()) {
      bufs[i] = Tensor::empty(p.shape(), p.dtype(), p.device());
      first = true;
    }
    if (bufs[i].defined()) check_state(bufs[i], p, "SGD");
    auto update = kernel_for(p, &sgd_update_cpu, FG_CUDA(&sgd_update_cuda), "SGD");
    update(p.dtype(), p.data_ptr(), g.data_ptr(), h.momentum != 0 ? bufs[i].data_ptr() : nullptr, p.numel(), h, first);
    bump_version(p);
    if (bufs[i].defined()) bump_version(bufs[i]);
  }
  return bufs;
}

void adam_step(const Tensors& params, const Tensors& exp_avgs, const Tensors& exp_avg_sqs,
               const Tensors& steps, const AdamHyper& h) {
  FG_CHECK(exp_avgs.size() == params.size() && exp_avg_sqs.size() == params.size() && steps.size() == params.size(),
           Value, "Adam: state lists must match the parameter list");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor g = grad_for(p, "Adam");
    if (!g.defined()) continue;
    check_state(exp_avgs[i], p, "Adam");
    check_state(exp_avg_sqs[i], p, "Adam");
    FG_CHECK(steps[i].dtype() == DType::Int64 && steps[i].numel() == 1 && steps[i].device().is_cpu(), Value,
             "Adam: step counters must be int64 scalars on the CPU");
    int64_t step = ++*steps[i].data<int64_t>();
    auto update = kernel_for(p, &adam_update_cpu, FG_CUDA(&adam_update_cuda), "Adam");
    update(p.dtype(), p.data_ptr(), g.data_ptr(), exp_avgs[i].data_ptr(), exp_avg_sqs[i].data_ptr(), p.numel(), h, step);
    for (const Tensor& written : {p, exp_avgs[i], exp_avg_sqs[i], steps[i]}) bump_version(written);
  }
}

double clip_grad_norm(const Tensors& params, double max_norm) {
  FG_CHECK(max_norm > 0, Value, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  double total = 0;
  for (const Tensor& p : params) {
    Tensor g = grad_of(p);
    if (!g.defined()) continue;
    Tensor c = contiguous_raw(g);
    if (!c.device().is_cpu()) {  // one reduction on the device, one value read back
      total += item(sum(square(converted(c, DType::Float64)), Dims{}, false));
      continue;
    }
    total += is_floating(c.dtype()) && !is_half(c.dtype()) ? sum_squares_cpu(c.dtype(), c.data_ptr(), c.numel())
                                                          : sum_squares_cpu(DType::Float64, converted(c, DType::Float64).data_ptr(), c.numel());
  }
  double norm = std::sqrt(total);
  double factor = max_norm / (norm + 1e-6);
  if (factor < 1) {
    bool mode = grad_enabled();
    set_grad_enabled(false);
    for (const Tensor& p : params) {
      Tensor g = grad_of(p);
      if (g.defined()) set_grad(p, g * factor);  // out of place: a grad may share memory with a view
    }
    set_grad_enabled(mode);
  }
  return norm;
}

}  // namespace fg::optim
