// Optimizer updates as ops: sgd_update and adam_update write the parameter and its state in
// place and read their hyper-parameters (and Adam's step counter) from tensors, so eager,
// compiled and captured steps share one path (the review's first example; ggml's opt-step ops).
#include "flowgrad/ops/optim_ops.h"

#include "kernels/optim/optim.h"

namespace fg {
namespace {

void check_buffer(const Tensor& t, const Tensor& p, const char* op, const char* what) {
  FG_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype() && t.is_contiguous(), Value, op, ": ", what, " ",
           describe(t), " does not match parameter ", describe(p), " (same shape and dtype, contiguous)");
}

void check_hyper(const Tensor& hyper, int slots, const char* op) {
  FG_CHECK(hyper.dtype() == DType::Float64 && hyper.numel() == slots && hyper.is_contiguous(), Value, op,
           ": hyper-parameters must be a contiguous float64 tensor of ", slots, " values, got ", describe(hyper));
}

// in: param, grad, hyper (kSgdSlots,) [, momentum_buf]
Specs sgd_update_shape(TensorList in, const Attrs&) {
  FG_CHECK(in.size() == 3 || in.size() == 4, Value, "sgd_update: expected 3 or 4 inputs, got ", in.size());
  FG_CHECK(in[0].is_contiguous() && is_floating(in[0].dtype()), Value,
           "sgd_update: parameters must be contiguous floating tensors, got ", describe(in[0]));
  check_buffer(in[1], in[0], "sgd_update", "gradient");
  check_hyper(in[2], kSgdSlots, "sgd_update");
  if (in.size() == 4) check_buffer(in[3], in[0], "sgd_update", "momentum buffer");
  return {};
}

// in: param, grad, hyper (kAdamSlots,), step (0-d int64), exp_avg, exp_avg_sq
Specs adam_update_shape(TensorList in, const Attrs&) {
  FG_CHECK(in.size() == 6, Value, "adam_update: expected 6 inputs, got ", in.size());
  FG_CHECK(in[0].is_contiguous() && is_floating(in[0].dtype()), Value,
           "adam_update: parameters must be contiguous floating tensors, got ", describe(in[0]));
  check_buffer(in[1], in[0], "adam_update", "gradient");
  check_hyper(in[2], kAdamSlots, "adam_update");
  FG_CHECK(in[3].dtype() == DType::Int64 && in[3].numel() == 1, Value,
           "adam_update: the step counter must be a one-element int64 tensor, got ", describe(in[3]));
  check_buffer(in[4], in[0], "adam_update", "exp_avg");
  check_buffer(in[5], in[0], "adam_update", "exp_avg_sq");
  return {};
}

template <decltype(&sgd_update_cpu) Run>
void sgd_kernel(TensorList in, const Tensors&, const Attrs&) {
  const Tensor& p = in[0];
  Run(p.dtype(), p.data_ptr(), in[1].data_ptr(), in.size() == 4 ? in[3].data_ptr() : nullptr, p.numel(),
      in[2].data<double>());
}

template <decltype(&adam_update_cpu) Run>
void adam_kernel(TensorList in, const Tensors&, const Attrs&) {
  const Tensor& p = in[0];
  Run(p.dtype(), p.data_ptr(), in[1].data_ptr(), in[4].data_ptr(), in[5].data_ptr(), p.numel(),
      in[2].data<double>(), in[3].data<int64_t>());
}

// kHalfNative: the kernels reject half parameters themselves; widening copies would be updated
// instead of the parameters.
const OpDef k_sgd_update{.name = "sgd_update", .family = Family::Optim, .flags = kHalfNative,
                         .shape_rule = sgd_update_shape, .cpu = sgd_kernel<sgd_update_cpu>,
                         .cuda = FG_CUDA(sgd_kernel<sgd_update_cuda>), .not_differentiable = "optimizer update",
                         .mutated_inputs = 0b1001};  // param, momentum buffer
const OpDef k_adam_update{.name = "adam_update", .family = Family::Optim, .flags = kHalfNative,
                          .shape_rule = adam_update_shape, .cpu = adam_kernel<adam_update_cpu>,
                          .cuda = FG_CUDA(adam_kernel<adam_update_cuda>), .not_differentiable = "optimizer update",
                          .mutated_inputs = 0b111001};  // param, step, exp_avg, exp_avg_sq

}  // namespace

std::vector<const OpDef*> optim_ops() { return {&k_sgd_update, &k_adam_update}; }

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& hyper, const Tensor& momentum_buf) {
  if (momentum_buf.defined())
    run_op(k_sgd_update, {param, grad, hyper, momentum_buf});
  else
    run_op(k_sgd_update, {param, grad, hyper});
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& hyper, const Tensor& step,
                 const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  run_op(k_adam_update, {param, grad, hyper, step, exp_avg, exp_avg_sq});
}

}  // namespace fg
