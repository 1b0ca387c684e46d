// In-place ops that have no out-of-place twin in an elementwise family: fill_, copy_,
// masked_fill_ and index_put_ (the op behind t[idx] = value). Each is in the InPlace group: run_op hands the
// kernel input 0 as its output (a target it cannot write directly is written through a temporary
// by ops: ops/decompose.h), checks that the target may be written, and bumps its version. Elementwise twins (add_, mul_, ...) live in elementwise.cpp.
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/index/index.h"

namespace fg {
namespace {

Specs same_as_target(TensorList in, const Attrs&) { return {{in[0].shape(), in[0].dtype()}}; }

// Whether a tensor of shape `from` broadcasts to exactly `to` (NumPy's rules).
bool broadcasts_to(const Dims& from, const Dims& to) {
  if (from.size() > to.size()) return false;
  for (int i = 1; i <= from.size(); ++i)
    if (from[from.size() - i] != 1 && from[from.size() - i] != to[to.size() - i]) return false;
  return true;
}

// The target's gradient when the op overwrites every element.
Tensor overwritten(const BackwardCtx& c) {
  return zeros(c.input_specs[0].shape, c.grads[0].dtype(), c.grads[0].device());
}

// ---- fill_ ----
void fill_kernel(const KernelEnv& env, TensorList, const Tensors& out, const Attrs& attrs) { raw::fill(env, out[0], attrs.f("value")); }
Tensors fill_backward(const BackwardCtx& c) { return {overwritten(c)}; }
const OpDef k_fill_{.id = OpId::fill_, .name = "fill_", .family = Family::Creation, .flags = kHalfNative,
                    .shape_rule = same_as_target, .cpu = fill_kernel, .cuda = FG_CUDA(fill_kernel),
                    .backward = fill_backward};

// The same op under another name, for errors and traces: zero_ is fill_ with 0, uniform_ and
// normal_ copy_ fresh random values in.
OpDef renamed(OpDef op, OpId id) {
  op.id = id;
  op.name = op_name(id).data();
  return op;
}
const OpDef k_zero_ = renamed(k_fill_, OpId::zero_);

// ---- copy_: src broadcast to the target's shape, cast to its dtype ----
Specs copy_shape(TensorList in, const Attrs&) {
  const Tensor &dst = in[0], &src = in[1];
  FG_CHECK(broadcasts_to(src.shape(), dst.shape()), Shape, "copy_: source ",
           to_string(src.shape()), " cannot be broadcast to destination ", to_string(dst.shape()));
  return same_as_target(in, {});
}
void copy_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) { raw::copy_into(env, out[0], in[1]); }
Tensors copy_backward(const BackwardCtx& c) {
  return {overwritten(c), sum_to(c.grads[0], c.input_specs[1].shape)};
}
const OpDef k_copy_{.id = OpId::copy_, .name = "copy_", .family = Family::Copy, .flags = kHalfNative,
                    .shape_rule = copy_shape, .cpu = copy_kernel, .cuda = FG_CUDA(copy_kernel),
                    .backward = copy_backward};
const OpDef k_uniform_ = renamed(k_copy_, OpId::uniform_);
const OpDef k_normal_ = renamed(k_copy_, OpId::normal_);

// ---- masked_fill_: value where the (broadcast) bool mask is true ----
Specs masked_fill_shape(TensorList in, const Attrs&) {
  FG_CHECK(in[1].dtype() == DType::Bool, DType, "masked_fill_: mask must be bool, got ", describe(in[1]));
  FG_CHECK(broadcasts_to(in[1].shape(), in[0].shape()), Shape,
           "masked_fill_: mask ", to_string(in[1].shape()), " cannot be broadcast to the tensor's shape ",
           to_string(in[0].shape()));
  return same_as_target(in, {});
}
template <decltype(&where_cpu) Run>
void masked_fill_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& y = out[0];
  Tensor value = Tensor::temporary(env, Dims{}, y.dtype(), y.device());
  raw::fill(env, value, attrs.f("value"));
  const Tensor& x = in[0];  // of y's dtype: a target of another is written through a temporary
  FG_ASSERT(x.dtype() == y.dtype());
  Run(env, y.dtype(), raw::strided_over<4>(y.shape(), {&y, &in[1], &value, &x}));
}
Tensors masked_fill_backward(const BackwardCtx& c) {
  const Tensor& g = c.grads[0];
  return {where(c.inputs[1], scalar_like(g, 0), g), Tensor()};
}
const OpDef k_masked_fill_{.id = OpId::masked_fill_, .name = "masked_fill_", .family = Family::Ternary,
                           .flags = kHalfNative,
                           .shape_rule = masked_fill_shape, .cpu = masked_fill_kernel<where_cpu>,
                           .cuda = FG_CUDA(masked_fill_kernel<where_cuda>), .backward = masked_fill_backward,
                           .saved = Saved::Inputs, .nondiff_inputs = 2u};

// ---- index_put_: the target's row-major elements `positions` take `value` ----
Specs index_put_shape(TensorList in, const Attrs&) {
  const Tensor &positions = in[1], &value = in[2];
  FG_CHECK(positions.dtype() == DType::Int64, DType, "index_put_: positions must be int64, got ", describe(positions));
  FG_CHECK(broadcasts_to(value.shape(), positions.shape()), Shape,
           "index_put_ (t[index] = value): value of shape ", to_string(value.shape()),
           " cannot be broadcast to the indexed shape ", to_string(positions.shape()));
  return same_as_target(in, {});
}
// The value in the target's dtype (Promote); the kernel still broadcasts it to the positions.
Promotion index_put_promotion(TensorList, const Specs& specs, const Attrs&) { return {specs[0].dtype, 4u}; }
template <decltype(&index_put_cpu) Run>
void index_put_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) {
  const Tensor& y = out[0];  // contiguous (run_op's in-place rule)
  if (!y.is_same(in[0])) raw::copy_into(env, y, in[0]);
  Tensor idx = raw::checked_index(env, in[1], y.numel(), "index_put_", 0);
  Tensor values = Tensor::temporary(env, in[1].shape(), y.dtype(), y.device());
  raw::copy_into(env, values, in[2]);
  Run(env, y.dtype(), values.data_ptr(), idx.data<int64_t>(), idx.numel(), y.data_ptr());
}
Tensors index_put_backward(const BackwardCtx& c) {
  const Tensor &g = c.grads[0], &positions = c.inputs[1];
  Tensors grads(3);
  if (c.needs_grad[0]) grads[0] = index_put_(clone(g), positions, scalar_like(g, 0));
  if (c.needs_grad[2]) {
    Tensor picked = index_select(reshape(g, {-1}), 0, reshape(positions, {-1}));
    grads[2] = sum_to(reshape(picked, positions.shape().vec()), c.input_specs[2].shape);
  }
  return grads;
}
const OpDef k_index_put_{.id = OpId::index_put_, .name = "index_put_", .family = Family::Index, .flags = kHalfNative,
                         .shape_rule = index_put_shape, .promotion = index_put_promotion, .cpu = index_put_kernel<index_put_cpu>,
                         .cuda = FG_CUDA(index_put_kernel<index_put_cuda>), .backward = index_put_backward,
                         .saved = Saved::Inputs, .nondiff_inputs = 2u};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(fill_);
FG_REGISTER(zero_);
FG_REGISTER(copy_);
FG_REGISTER(uniform_);
FG_REGISTER(normal_);
FG_REGISTER(masked_fill_);
FG_REGISTER(index_put_);

Tensor fill_(const Tensor& x, double value) { return run_op1(k_fill_, {x}, {{"value", value}}); }
Tensor zero_(const Tensor& x) { return run_op1(k_zero_, {x}, {{"value", 0.0}}); }
Tensor copy_(const Tensor& dst, const Tensor& src) { return run_op1(k_copy_, {dst, src}); }
Tensor masked_fill_(const Tensor& x, const Tensor& mask, double value) {
  return run_op1(k_masked_fill_, {x, mask}, {{"value", value}});
}
Tensor index_put_(const Tensor& x, const Tensor& positions, const Tensor& value) {
  return run_op1(k_index_put_, {x, positions, value});
}

Tensor uniform_(const Tensor& x, double low, double high) {
  FG_CHECK(is_floating(x.dtype()), DType, "uniform_: expected a floating tensor, got ", describe(x));
  return run_op1(k_uniform_, {x, rand(x.shape(), x.dtype(), x.device()) * (high - low) + low});
}
Tensor normal_(const Tensor& x, double mean, double std) {
  FG_CHECK(is_floating(x.dtype()), DType, "normal_: expected a floating tensor, got ", describe(x));
  return run_op1(k_normal_, {x, randn(x.shape(), x.dtype(), x.device()) * std + mean});
}

}  // namespace fg
