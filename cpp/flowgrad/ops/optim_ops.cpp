// Optimizer updates as ops: sgd_update and adam_update write the parameter and its state in
// place and read their hyper-parameters (and Adam's step counter) from tensors, so eager,
// compiled and captured steps share one path (the review's first example; ggml's opt-step ops).
#include "flowgrad/ops/optim_ops.h"

#include <algorithm>
#include <cstdint>
#include <vector>

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
void sgd_kernel(const KernelEnv& env, TensorList in, const Tensors&, const Attrs&) {
  const Tensor& p = in[0];
  Run(env, p.dtype(), p.data_ptr(), in[1].data_ptr(), in.size() == 4 ? in[3].data_ptr() : nullptr, p.numel(),
      in[2].data<double>());
}

template <decltype(&adam_update_cpu) Run>
void adam_kernel(const KernelEnv& env, TensorList in, const Tensors&, const Attrs&) {
  const Tensor& p = in[0];
  Run(env, p.dtype(), p.data_ptr(), in[1].data_ptr(), in[4].data_ptr(), in[5].data_ptr(), p.numel(),
      in[2].data<double>(), in[3].data<int64_t>());
}

// kHalfNative: the kernels reject half parameters themselves; widening copies would be updated
// instead of the parameters.
const OpDef k_sgd_update{.id = OpId::sgd_update, .name = "sgd_update", .family = Family::Optim, .flags = kHalfNative,
                         .shape_rule = sgd_update_shape, .cpu = sgd_kernel<sgd_update_cpu>,
                         .cuda = FG_CUDA(sgd_kernel<sgd_update_cuda>), .not_differentiable = "optimizer update",
                         .mutated_inputs = {.head = 0b1001}};  // param, momentum buffer
const OpDef k_adam_update{.id = OpId::adam_update, .name = "adam_update", .family = Family::Optim, .flags = kHalfNative,
                          .shape_rule = adam_update_shape, .cpu = adam_kernel<adam_update_cpu>,
                          .cuda = FG_CUDA(adam_kernel<adam_update_cuda>), .not_differentiable = "optimizer update",
                          .mutated_inputs = {.head = 0b111001}};  // param, step, exp_avg, exp_avg_sq

// Multi-tensor forms: in = hyper, then one group per parameter holding the per-parameter op's
// inputs without hyper: sgd (param, grad), sgd with momentum (param, grad, buf), adam (param,
// grad, step, exp_avg, exp_avg_sq). Any number of groups: one call updates a whole param group.
struct MultiLayout {
  const char* name;
  int per_group;
  uint32_t written;  // bits within a group
  Specs (*single_shape)(TensorList, const Attrs&);
};
constexpr MultiLayout kSgdMulti{"sgd_update_multi", 2, 0b1, sgd_update_shape};
constexpr MultiLayout kSgdMomentumMulti{"sgd_momentum_update_multi", 3, 0b101, sgd_update_shape};
constexpr MultiLayout kAdamMulti{"adam_update_multi", 5, 0b11101, adam_update_shape};

constexpr WrittenInputs written_inputs(const MultiLayout& l) { return {.first = 1, .period = l.per_group, .each = l.written}; }

// The per-parameter op's inputs for group g.
Tensors single_inputs(TensorList in, int per_group, int g) {
  const Tensor* group = in.begin() + 1 + per_group * g;
  Tensors single{group[0], group[1], in[0]};
  single.insert(single.end(), group + 2, group + per_group);
  return single;
}

template <const MultiLayout& L>
Specs multi_shape(TensorList in, const Attrs& attrs) {
  int groups = in.empty() ? 0 : static_cast<int>(in.size() - 1) / L.per_group;
  FG_CHECK(!in.empty() && groups >= 1 && in.size() == size_t(1 + L.per_group * groups), Value, L.name,
           ": expected hyper and one or more groups of ", L.per_group, " tensors, got ", in.size(), " inputs");
  for (int g = 0; g < groups; ++g) {
    Tensors single = single_inputs(in, L.per_group, g);
    L.single_shape(single, attrs);
    FG_CHECK(single[0].dtype() == in[1].dtype(), Value, L.name, ": parameters must share one dtype, got ",
             describe(in[1]), " and ", describe(single[0]));
  }
  return {};
}

template <bool Momentum, decltype(&sgd_update_multi_cpu) Run>
void sgd_multi_kernel(const KernelEnv& env, TensorList in, const Tensors&, const Attrs&) {
  const int per = Momentum ? 3 : 2;
  std::vector<SgdItem> items;
  for (size_t i = 1; i < in.size(); i += per)
    items.push_back({in[i].data_ptr(), in[i + 1].data_ptr(), Momentum ? in[i + 2].data_ptr() : nullptr, in[i].numel()});
  Run(env, in[1].dtype(), items.data(), static_cast<int>(items.size()), in[0].data<double>());
}

template <decltype(&adam_update_multi_cpu) Run>
void adam_multi_kernel(const KernelEnv& env, TensorList in, const Tensors&, const Attrs&) {
  std::vector<AdamItem> items;
  for (size_t i = 1; i < in.size(); i += 5)
    items.push_back({in[i].data_ptr(), in[i + 1].data_ptr(), in[i + 3].data_ptr(), in[i + 4].data_ptr(),
                     in[i + 2].data<int64_t>(), in[i].numel()});
  Run(env, in[1].dtype(), items.data(), static_cast<int>(items.size()), in[0].data<double>());
}

const OpDef k_sgd_update_multi{.id = OpId::sgd_update_multi, .name = kSgdMulti.name, .family = Family::Optim,
                               .flags = kHalfNative,
                               .shape_rule = multi_shape<kSgdMulti>, .cpu = sgd_multi_kernel<false, sgd_update_multi_cpu>,
                               .cuda = FG_CUDA((sgd_multi_kernel<false, sgd_update_multi_cuda>)),
                               .not_differentiable = "optimizer update", .mutated_inputs = written_inputs(kSgdMulti)};
const OpDef k_sgd_momentum_update_multi{
    .id = OpId::sgd_momentum_update_multi, .name = kSgdMomentumMulti.name, .family = Family::Optim,
    .flags = kHalfNative,
    .shape_rule = multi_shape<kSgdMomentumMulti>, .cpu = sgd_multi_kernel<true, sgd_update_multi_cpu>,
    .cuda = FG_CUDA((sgd_multi_kernel<true, sgd_update_multi_cuda>)), .not_differentiable = "optimizer update",
    .mutated_inputs = written_inputs(kSgdMomentumMulti)};
const OpDef k_adam_update_multi{.id = OpId::adam_update_multi, .name = kAdamMulti.name, .family = Family::Optim,
                                .flags = kHalfNative,
                                .shape_rule = multi_shape<kAdamMulti>, .cpu = adam_multi_kernel<adam_update_multi_cpu>,
                                .cuda = FG_CUDA(adam_multi_kernel<adam_update_multi_cuda>),
                                .not_differentiable = "optimizer update", .mutated_inputs = written_inputs(kAdamMulti)};

// One call of a multi-tensor op over every group.
void run_groups(const OpDef& op, const Tensor& hyper, const Tensors& groups) {
  Tensors in{hyper};
  in.insert(in.end(), groups.begin(), groups.end());
  run_op(op, in);
}

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(sgd_update);
FG_REGISTER(adam_update);
FG_REGISTER(sgd_update_multi);
FG_REGISTER(sgd_momentum_update_multi);
FG_REGISTER(adam_update_multi);

void sgd_update_multi(const Tensor& hyper, const Tensors& groups, bool momentum) {
  run_groups(momentum ? k_sgd_momentum_update_multi : k_sgd_update_multi, hyper, groups);
}

void adam_update_multi(const Tensor& hyper, const Tensors& groups) { run_groups(k_adam_update_multi, hyper, groups); }

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
