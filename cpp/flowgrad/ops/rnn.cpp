// Recurrent sequences: lstm_sequence and gru_sequence run every step of one layer in one
// direction in one op (per step a GEMM by W_hh and a fused gate pass: kernels/rnn), and their
// backward ops run the backward through time the same way, so a sequence of T steps makes two
// nodes in eager autograd and in a compiled plan instead of about a dozen per step.
// Each op's extra outputs (the activated gates, GRU's gh_n) are what its backward reads; the
// public functions below do not return them, so no gradient ever reaches them.
#include "flowgrad/ops/ops.h"
#include "flowgrad/ops/raw.h"
#include "kernels/rnn/rnn.h"

namespace fg {
namespace {

// The operands of a sequence op: gi, h0, [c0], w_hh, [b_hh].
struct SequenceInputs {
  Tensor gi, h0, c0, w_hh, b_hh;
};
SequenceInputs unpack(TensorList in, bool lstm, bool has_bias) {
  size_t next = 0;
  SequenceInputs s;
  s.gi = in[next++], s.h0 = in[next++];
  if (lstm) s.c0 = in[next++];
  s.w_hh = in[next++];
  if (has_bias) s.b_hh = in[next];
  return s;
}

// Checks the operands; returns (T, N, H).
RnnSizes check_sequence(const char* op, TensorList in, const Attrs& attrs, int gates) {
  bool lstm = gates == 4, has_bias = attrs.b("has_bias");
  FG_CHECK(in.size() == static_cast<size_t>(3 + lstm + has_bias), Value, op, ": expected ", 3 + lstm + has_bias,
           " inputs, got ", in.size());
  SequenceInputs s = unpack(in, lstm, has_bias);
  const DType dt = s.gi.dtype();
  FG_CHECK(dt == DType::Float32 || dt == DType::Float64, DType, op, ": expected float32 or float64 inputs, got ",
           describe(s.gi));
  for (const Tensor* t : {&s.h0, &s.c0, &s.w_hh, &s.b_hh})
    FG_CHECK(!t->defined() || t->dtype() == dt, DType, op, ": every input must be ", dtype_name(dt), ", got ",
             describe(*t));
  FG_CHECK(s.w_hh.ndim() == 2 && s.w_hh.shape()[0] == gates * s.w_hh.shape()[1], Shape, op,
           ": expected w_hh of shape (", gates, " * hidden, hidden), got ", to_string(s.w_hh.shape()));
  const int64_t H = s.w_hh.shape()[1], G = gates * H;
  FG_CHECK(s.gi.ndim() == 3 && s.gi.shape()[2] == G, Shape, op, ": expected gi of shape (T, N, ", G,
           ") for hidden size ", H, ", got ", to_string(s.gi.shape()));
  const int64_t T = s.gi.shape()[0], N = s.gi.shape()[1];
  Dims state{N, H};
  FG_CHECK(s.h0.shape() == state, Shape, op, ": expected h0 of shape ", to_string(state), ", got ",
           to_string(s.h0.shape()));
  FG_CHECK(!lstm || s.c0.shape() == state, Shape, op, ": expected c0 of shape ", to_string(state), ", got ",
           to_string(s.c0.shape()));
  FG_CHECK(!has_bias || s.b_hh.shape() == Dims{G}, Shape, op, ": expected b_hh of shape (", G, "), got ",
           to_string(s.b_hh.shape()));
  return {T, N, H};
}

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// dW_hh = sum over steps of dgh_t^T h_{t-1}: one product over every step's state before it.
Tensor recurrent_weight_grad(const Tensor& dgh, const Tensor& y, const Tensor& h0, bool reverse) {
  const int64_t T = y.shape()[0], G = dgh.shape()[2], H = y.shape()[2];
  Tensor first = unsqueeze(h0, 0);
  Tensor before = T == 1   ? first
                  : reverse ? cat({slice(y, 0, 1, T, 1), first}, 0)
                            : cat({first, slice(y, 0, 0, T - 1, 1)}, 0);
  return matmul(transpose(reshape(dgh, {-1, G}), 0, 1), reshape(before, {-1, H}));
}

void refuse_second_order(const BackwardCtx& c, const char* op) {
  FG_CHECK(!c.create_graph, Runtime, op,
           ": second-order gradients through LSTM/GRU layers and cells are not supported (their backward "
           "through time is one first-order op); differentiate them once (create_graph=False)");
}

// ---- lstm_sequence: (gi, h0, c0, w_hh, [b_hh]) -> (y, cs, gates); attrs: reverse, has_bias ----
Specs lstm_sequence_shape(TensorList in, const Attrs& attrs) {
  RnnSizes s = check_sequence("lstm_sequence", in, attrs, 4);
  DType dt = in[0].dtype();
  Dims states{s.steps, s.batch, s.hidden};
  return {{states, dt}, {states, dt}, {in[0].shape(), dt}};
}
template <decltype(&lstm_sequence_cpu) Run>
void lstm_sequence_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  SequenceInputs s = unpack(in, true, attrs.b("has_bias"));
  Tensor gi = raw::contiguous(env, s.gi), h0 = raw::contiguous(env, s.h0), c0 = raw::contiguous(env, s.c0);
  Tensor w = raw::contiguous(env, s.w_hh), b = s.b_hh.defined() ? raw::contiguous(env, s.b_hh) : Tensor();
  RnnSizes sizes{gi.shape()[0], gi.shape()[1], w.shape()[1]};
  Run(env, gi.dtype(), attrs.b("reverse"), sizes, gi.data_ptr(), h0.data_ptr(), c0.data_ptr(), w.data_ptr(),
      ptr_or_null(b), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}

// (dy, dcs, gates, cs, c0, w_hh) -> (dgates, dh0, dc0); attrs: reverse.
Specs lstm_sequence_backward_shape(TensorList in, const Attrs&) {
  FG_CHECK(in[0].shape() == in[3].shape() && in[1].shape() == in[3].shape(), Shape,
           "lstm_sequence_backward: gradients ", to_string(in[0].shape()), " and ", to_string(in[1].shape()),
           " do not match the states ", to_string(in[3].shape()));
  return {{in[2].shape(), in[2].dtype()}, {in[4].shape(), in[4].dtype()}, {in[4].shape(), in[4].dtype()}};
}
template <decltype(&lstm_sequence_backward_cpu) Run>
void lstm_sequence_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor dy = raw::contiguous(env, in[0]), dcs = raw::contiguous(env, in[1]), gates = raw::contiguous(env, in[2]);
  Tensor cs = raw::contiguous(env, in[3]), c0 = raw::contiguous(env, in[4]), w = raw::contiguous(env, in[5]);
  RnnSizes sizes{cs.shape()[0], cs.shape()[1], cs.shape()[2]};
  Run(env, cs.dtype(), attrs.b("reverse"), sizes, dy.data_ptr(), dcs.data_ptr(), gates.data_ptr(), cs.data_ptr(),
      c0.data_ptr(), w.data_ptr(), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}
const OpDef k_lstm_sequence_backward{
    .id = OpId::lstm_sequence_backward, .name = "lstm_sequence_backward", .family = Family::NN,
    .shape_rule = lstm_sequence_backward_shape,
    .cpu = lstm_sequence_backward_kernel<lstm_sequence_backward_cpu>,
    .cuda = FG_CUDA(lstm_sequence_backward_kernel<lstm_sequence_backward_cuda>),
    .not_differentiable = "used for first-order gradients only; lstm_sequence refuses second order"};

Tensors lstm_sequence_backward(const BackwardCtx& c) {
  refuse_second_order(c, "lstm_sequence");
  bool reverse = c.attrs.b("reverse"), has_bias = c.attrs.b("has_bias");
  const Tensor &h0 = c.inputs[1], &c0 = c.inputs[2], &w = c.inputs[3];
  const Tensor &y = c.outputs[0], &cs = c.outputs[1], &gates = c.outputs[2];
  Tensors d = run_op(k_lstm_sequence_backward, {c.grads[0], c.grads[1], gates, cs, c0, w}, {{"reverse", reverse}});
  Tensors grads{c.needs_grad[0] ? d[0] : Tensor(), c.needs_grad[1] ? d[1] : Tensor(),
                c.needs_grad[2] ? d[2] : Tensor(),
                c.needs_grad[3] ? recurrent_weight_grad(d[0], y, h0, reverse) : Tensor()};
  if (has_bias) grads.push_back(c.needs_grad[4] ? sum(d[0], Dims{0, 1}, false) : Tensor());
  return grads;
}
const OpDef k_lstm_sequence{.id = OpId::lstm_sequence, .name = "lstm_sequence", .family = Family::NN,
                            .shape_rule = lstm_sequence_shape, .cpu = lstm_sequence_kernel<lstm_sequence_cpu>,
                            .cuda = FG_CUDA(lstm_sequence_kernel<lstm_sequence_cuda>),
                            .backward = lstm_sequence_backward, .saved = Saved::InputsAndOutputs};

// ---- gru_sequence: (gi, h0, w_hh, [b_hh]) -> (y, gates, ghn); attrs: reverse, has_bias ----
Specs gru_sequence_shape(TensorList in, const Attrs& attrs) {
  RnnSizes s = check_sequence("gru_sequence", in, attrs, 3);
  DType dt = in[0].dtype();
  Dims states{s.steps, s.batch, s.hidden};
  return {{states, dt}, {in[0].shape(), dt}, {states, dt}};
}
template <decltype(&gru_sequence_cpu) Run>
void gru_sequence_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  SequenceInputs s = unpack(in, false, attrs.b("has_bias"));
  Tensor gi = raw::contiguous(env, s.gi), h0 = raw::contiguous(env, s.h0), w = raw::contiguous(env, s.w_hh);
  Tensor b = s.b_hh.defined() ? raw::contiguous(env, s.b_hh) : Tensor();
  RnnSizes sizes{gi.shape()[0], gi.shape()[1], w.shape()[1]};
  Run(env, gi.dtype(), attrs.b("reverse"), sizes, gi.data_ptr(), h0.data_ptr(), w.data_ptr(), ptr_or_null(b),
      out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}

// (dy, gates, ghn, y, h0, w_hh) -> (dgi, dgh, dh0); attrs: reverse.
Specs gru_sequence_backward_shape(TensorList in, const Attrs&) {
  FG_CHECK(in[0].shape() == in[3].shape(), Shape, "gru_sequence_backward: gradient ", to_string(in[0].shape()),
           " does not match the states ", to_string(in[3].shape()));
  return {{in[1].shape(), in[1].dtype()}, {in[1].shape(), in[1].dtype()}, {in[4].shape(), in[4].dtype()}};
}
template <decltype(&gru_sequence_backward_cpu) Run>
void gru_sequence_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor dy = raw::contiguous(env, in[0]), gates = raw::contiguous(env, in[1]), ghn = raw::contiguous(env, in[2]);
  Tensor y = raw::contiguous(env, in[3]), h0 = raw::contiguous(env, in[4]), w = raw::contiguous(env, in[5]);
  RnnSizes sizes{y.shape()[0], y.shape()[1], y.shape()[2]};
  Run(env, y.dtype(), attrs.b("reverse"), sizes, dy.data_ptr(), gates.data_ptr(), ghn.data_ptr(), y.data_ptr(),
      h0.data_ptr(), w.data_ptr(), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}
const OpDef k_gru_sequence_backward{
    .id = OpId::gru_sequence_backward, .name = "gru_sequence_backward", .family = Family::NN,
    .shape_rule = gru_sequence_backward_shape,
    .cpu = gru_sequence_backward_kernel<gru_sequence_backward_cpu>,
    .cuda = FG_CUDA(gru_sequence_backward_kernel<gru_sequence_backward_cuda>),
    .not_differentiable = "used for first-order gradients only; gru_sequence refuses second order"};

Tensors gru_sequence_backward(const BackwardCtx& c) {
  refuse_second_order(c, "gru_sequence");
  bool reverse = c.attrs.b("reverse"), has_bias = c.attrs.b("has_bias");
  const Tensor &h0 = c.inputs[1], &w = c.inputs[2];
  const Tensor &y = c.outputs[0], &gates = c.outputs[1], &ghn = c.outputs[2];
  Tensors d = run_op(k_gru_sequence_backward, {c.grads[0], gates, ghn, y, h0, w}, {{"reverse", reverse}});
  Tensors grads{c.needs_grad[0] ? d[0] : Tensor(), c.needs_grad[1] ? d[2] : Tensor(),
                c.needs_grad[2] ? recurrent_weight_grad(d[1], y, h0, reverse) : Tensor()};
  if (has_bias) grads.push_back(c.needs_grad[3] ? sum(d[1], Dims{0, 1}, false) : Tensor());
  return grads;
}
const OpDef k_gru_sequence{.id = OpId::gru_sequence, .name = "gru_sequence", .family = Family::NN,
                           .shape_rule = gru_sequence_shape, .cpu = gru_sequence_kernel<gru_sequence_cpu>,
                           .cuda = FG_CUDA(gru_sequence_kernel<gru_sequence_cuda>),
                           .backward = gru_sequence_backward, .saved = Saved::InputsAndOutputs};

Tensors sequence_inputs(std::initializer_list<Tensor> first, const Tensor& w_hh, const Tensor& b_hh) {
  Tensors in(first);
  in.push_back(w_hh);
  if (b_hh.defined()) in.push_back(b_hh);
  return in;
}

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(lstm_sequence);
FG_REGISTER(lstm_sequence_backward);
FG_REGISTER(gru_sequence);
FG_REGISTER(gru_sequence_backward);

Tensors lstm_sequence(const Tensor& gi, const Tensor& h0, const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh,
                      bool reverse) {
  Tensors out = run_op(k_lstm_sequence, sequence_inputs({gi, h0, c0}, w_hh, b_hh),
                       {{"reverse", reverse}, {"has_bias", b_hh.defined()}});
  return {out[0], out[1]};
}
Tensor gru_sequence(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, bool reverse) {
  return run_op1(k_gru_sequence, sequence_inputs({gi, h0}, w_hh, b_hh),
                 {{"reverse", reverse}, {"has_bias", b_hh.defined()}});
}

}  // namespace fg
