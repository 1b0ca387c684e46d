// Fused cross-entropy: the forward reads the logits once for logsumexp and loss, the backward
// writes softmax - smoothed one-hot in one kernel. cross_entropy() (functional.cpp) routes
// integer targets here; the composite built from log_softmax and gather stays as the reference.
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/loss/cross_entropy.h"

namespace fg {
namespace {

// inputs: logits (rows, classes) or (classes,), target (rows,) or () of int64;
// attrs: ignore_index, label_smoothing, reduction (a Reduction).
// outputs: loss, lse (rows,), divisor () (see kernels/loss/cross_entropy.h).
int64_t ce_rows(const Tensor& logits) { return logits.ndim() == 2 ? logits.shape()[0] : 1; }
LossReduce ce_reduce(const Attrs& attrs) { return static_cast<LossReduce>(attrs.i("reduction")); }

Specs cross_entropy_shape(TensorList in, const Attrs& attrs) {
  const Tensor &x = in[0], &t = in[1];
  FG_CHECK(x.ndim() == 1 || x.ndim() == 2, Shape, "cross_entropy: fused logits must be (N, C) or (C,), got ",
           to_string(x.shape()));
  FG_CHECK(t.dtype() == DType::Int64 && t.ndim() == x.ndim() - 1 && (x.ndim() == 1 || t.shape()[0] == x.shape()[0]),
           Shape, "cross_entropy: fused target must be int64 of shape (N,) or (), got ", describe(t));
  FG_CHECK(is_floating(x.dtype()), DType, "cross_entropy: logits must be floating, got ", describe(x));
  Dims loss = ce_reduce(attrs) == LossReduce::None ? t.shape() : Dims{};
  DType stats = is_half(x.dtype()) ? DType::Float32 : x.dtype();  // lse keeps float32 precision
  return {{loss, x.dtype()}, {Dims{ce_rows(x)}, stats}, {Dims{}, stats}};
}

void check_targets_now(const Tensor& t, const CrossEntropyArgs& a) {
  const int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < a.rows; ++i)
    FG_CHECK(p[i] == a.ignore_index || (p[i] >= 0 && p[i] < a.classes), Index, "cross_entropy: target ", p[i],
             " is out of range for ", a.classes, " classes");
}

void cross_entropy_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]), t = raw::contiguous(env, in[1]);
  CrossEntropyArgs a{ce_rows(x), x.shape().back(), attrs.i("ignore_index"), attrs.f("label_smoothing")};
#if defined(FLOWGRAD_HAVE_CUDA)
  if (x.device().is_cuda()) {  // targets are checked by the kernel (raised at the next host sync)
    Tensor rows = Tensor::temporary(env, Dims{a.rows}, x.dtype(), x.device());
    return cross_entropy_forward_cuda(env, x.dtype(), x.data_ptr(), t.data<int64_t>(), a, ce_reduce(attrs),
                                      out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr(), rows.data_ptr());
  }
#endif
  check_targets_now(t, a);
  cross_entropy_forward_cpu(env, x.dtype(), x.data_ptr(), t.data<int64_t>(), a, ce_reduce(attrs), out[0].data_ptr(),
                            out[1].data_ptr(), out[2].data_ptr());
}

// inputs: logits, target, lse, grad (the loss's gradient), divisor; output: grad_logits.
Specs cross_entropy_backward_shape(TensorList in, const Attrs&) { return {{in[0].shape(), in[0].dtype()}}; }
template <decltype(&cross_entropy_backward_cpu) Run>
void cross_entropy_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]), t = raw::contiguous(env, in[1]), g = raw::contiguous(env, in[3]);
  CrossEntropyArgs a{ce_rows(x), x.shape().back(), attrs.i("ignore_index"), attrs.f("label_smoothing")};
  Run(env, x.dtype(), x.data_ptr(), t.data<int64_t>(), in[2].data_ptr(), g.data_ptr(),
      ce_reduce(attrs) == LossReduce::None, in[4].data_ptr(), a, out[0].data_ptr());
}
const OpDef k_cross_entropy_backward{
    .id = OpId::cross_entropy_backward, .name = "cross_entropy_backward", .family = Family::NN,
    .shape_rule = cross_entropy_backward_shape,
    .cpu = cross_entropy_backward_kernel<cross_entropy_backward_cpu>,
    .cuda = FG_CUDA(cross_entropy_backward_kernel<cross_entropy_backward_cuda>),
    .not_differentiable = "cross_entropy's backward rule builds a differentiable gradient when create_graph is set",
    .nondiff_inputs = 0b11111u};

// (softmax - smoothed one-hot) * grad / divisor from public ops, for create_graph.
Tensor composite_logit_grad(const BackwardCtx& c) {
  const Tensor &x = c.inputs[0], &t = c.inputs[1];
  int64_t classes = x.shape().back();
  double eps = c.attrs.f("label_smoothing");
  Tensor valid = ne(t, scalar_like(t, static_cast<double>(c.attrs.i("ignore_index"))));
  Tensor q = cast(one_hot(where(valid, t, scalar_like(t, 0)), classes), x.dtype()) * (1.0 - eps) +
             eps / static_cast<double>(classes);
  Tensor scale = cast(valid, x.dtype()) * c.grads[0] / c.outputs[2];
  return (softmax(x, -1) - q) * unsqueeze(scale, -1);
}

Tensors cross_entropy_backward(const BackwardCtx& c) {
  if (c.create_graph) return {composite_logit_grad(c), Tensor()};
  return {run_op1(k_cross_entropy_backward, {c.inputs[0], c.inputs[1], c.outputs[1], c.grads[0], c.outputs[2]},
                  c.attrs),
          Tensor()};
}
const OpDef k_cross_entropy{.id = OpId::cross_entropy, .name = "cross_entropy", .family = Family::NN,
                            .shape_rule = cross_entropy_shape,
                            .cpu = cross_entropy_kernel, .cuda = FG_CUDA(cross_entropy_kernel),
                            .backward = cross_entropy_backward, .saved = Saved::InputsAndOutputs,
                            .nondiff_inputs = 2u};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(cross_entropy);
FG_REGISTER(cross_entropy_backward);

Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                           Reduction reduction) {
  static_assert(static_cast<int>(Reduction::Mean) == static_cast<int>(LossReduce::Mean) &&
                static_cast<int>(Reduction::Sum) == static_cast<int>(LossReduce::Sum));
  return run_op(k_cross_entropy, {logits, target},
                {{"ignore_index", ignore_index}, {"label_smoothing", label_smoothing},
                 {"reduction", static_cast<int64_t>(reduction)}})[0];
}

}  // namespace fg
