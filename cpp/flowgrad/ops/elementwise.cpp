// Elementwise ops: unary math, binary arithmetic and comparisons with NumPy broadcasting,
// where, and cast. Backward rules sit beside each op and use public ops only.
#include <cmath>
#include <limits>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/elementwise/elementwise.h"

namespace fg {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <UnaryFn Fn>
Specs unary_shape(TensorList in, const Attrs&) {
  constexpr OpId op = op_of(Fn);
  DType dt = in[0].dtype();
  if constexpr (in_group(op, Group::Bitwise)) {
    FG_CHECK(!is_floating(dt), DType, op_name(op), ": expected a bool or integer tensor, got ",
             describe(in[0]), "; compare first (x > 0) or cast with .int()");
    return {{in[0].shape(), dt}};
  }
  FG_CHECK(dt != DType::Bool, DType, op_name(op), ": not defined for bool tensors (got ",
           describe(in[0]), "); cast with .int() or .float() first");
  return {{in[0].shape(), in_group(op, Group::FloatOnly) ? float_result(dt) : dt}};
}

// A float-only function of an integer or bool input computes in its float result (Promote).
Promotion unary_promotion(TensorList, const Specs& specs, const Attrs&) { return {specs[0].dtype, 1u}; }

// One wrapper per kernel family and device: Run is the CPU or the CUDA entry point. The input has
// the output's dtype (Promote).
template <UnaryFn Fn, decltype(&unary_cpu) Run>
void unary_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  FG_ASSERT(x.dtype() == out[0].dtype());
  double lo = Fn == UnaryFn::Clamp ? attrs.f("min") : kNaN;
  double hi = Fn == UnaryFn::Clamp ? attrs.f("max") : kNaN;
  Run(env, Fn, out[0].dtype(), raw::strided_over<2>(out[0].shape(), {&out[0], &x}), lo, hi);
}

// Prepared launch (compiled plans): views, dtype and clamp bounds fixed once.
template <UnaryFn Fn, decltype(&unary_cpu) Run>
Launch unary_prepare(TensorList in, const Tensors& out, const Attrs& attrs) {
  FG_ASSERT(in[0].dtype() == out[0].dtype());
  struct Args {
    DType dtype;
    Strided<2> s;  // (out, x)
    double lo, hi;
  };
  bool clamp = Fn == UnaryFn::Clamp;
  auto args = std::make_shared<Args>(Args{out[0].dtype(), raw::strided_over<2>(out[0].shape(), {&out[0], &in[0]}),
                                          clamp ? attrs.f("min") : kNaN, clamp ? attrs.f("max") : kNaN});
  return {[](const void* p, const KernelEnv& env) {
            auto* a = static_cast<const Args*>(p);
            Run(env, Fn, a->dtype, a->s, a->lo, a->hi);
          }, args};
}

Tensor ones_mask(const Tensor& cond, const Tensor& like) { return cast(cond, like.dtype()); }

// g * f'(saved) by the fused kernel of an activation's *_backward row (ops.def), defined below.
// It serves first-order gradients in one pass; the composite rules keep second order exact.
Tensor fused_grad(BinaryFn fn, const Tensor& g, const Tensor& saved);

// d/dx of each unary function, times g.
Tensors unary_backward_neg(const BackwardCtx& c) { return {-c.grads[0]}; }
Tensors unary_backward_abs(const BackwardCtx& c) { return {c.grads[0] * sign(c.inputs[0])}; }
Tensors unary_backward_square(const BackwardCtx& c) { return {c.grads[0] * c.inputs[0] * 2.0}; }
Tensors unary_backward_sign(const BackwardCtx& c) { return {c.grads[0] * 0.0}; }
Tensors unary_backward_relu(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  if (!c.create_graph) return {fused_grad(BinaryFn::ReluGrad, c.grads[0], x)};
  return {c.grads[0] * ones_mask(gt(x, scalar_like(x, 0)), x)};
}
Tensors unary_backward_exp(const BackwardCtx& c) { return {c.grads[0] * c.outputs[0]}; }
Tensors unary_backward_log(const BackwardCtx& c) { return {c.grads[0] / c.inputs[0]}; }
Tensors unary_backward_sqrt(const BackwardCtx& c) { return {c.grads[0] / (c.outputs[0] * 2.0)}; }
Tensors unary_backward_rsqrt(const BackwardCtx& c) {
  const Tensor& y = c.outputs[0];
  return {c.grads[0] * y * y * y * -0.5};
}
Tensors unary_backward_sin(const BackwardCtx& c) { return {c.grads[0] * cos(c.inputs[0])}; }
Tensors unary_backward_cos(const BackwardCtx& c) { return {-(c.grads[0] * sin(c.inputs[0]))}; }
Tensors unary_backward_tanh(const BackwardCtx& c) {
  const Tensor& y = c.outputs[0];
  if (!c.create_graph) return {fused_grad(BinaryFn::TanhGrad, c.grads[0], y)};
  return {c.grads[0] * (1.0 - y * y)};
}
Tensors unary_backward_erf(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  return {c.grads[0] * exp(-(x * x)) * 1.1283791670955126};  // 2 / sqrt(pi)
}
Tensors unary_backward_log1p(const BackwardCtx& c) { return {c.grads[0] / (c.inputs[0] + 1.0)}; }
Tensors unary_backward_expm1(const BackwardCtx& c) { return {c.grads[0] * (c.outputs[0] + 1.0)}; }
Tensors unary_backward_erfinv(const BackwardCtx& c) {  // d/dx erfinv(x) = sqrt(pi) / 2 * e^(y^2)
  const Tensor& y = c.outputs[0];
  return {c.grads[0] * exp(y * y) * 0.88622692545275801};
}
Tensors unary_backward_sigmoid(const BackwardCtx& c) {
  const Tensor& y = c.outputs[0];
  if (!c.create_graph) return {fused_grad(BinaryFn::SigmoidGrad, c.grads[0], y)};
  return {c.grads[0] * y * (1.0 - y)};
}
Tensors unary_backward_silu(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  if (!c.create_graph) return {fused_grad(BinaryFn::SiluGrad, c.grads[0], x)};
  Tensor s = sigmoid(x);
  return {c.grads[0] * s * (x * (1.0 - s) + 1.0)};
}
Tensors unary_backward_softplus(const BackwardCtx& c) {
  return {c.grads[0] * sigmoid(c.inputs[0])};
}
Tensors unary_backward_gelu(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  if (!c.create_graph) return {fused_grad(BinaryFn::GeluGrad, c.grads[0], x)};
  Tensor cdf = (erf(x * 0.7071067811865476) + 1.0) * 0.5;
  Tensor pdf = exp(x * x * -0.5) * 0.3989422804014327;  // 1 / sqrt(2 pi)
  return {c.grads[0] * (cdf + x * pdf)};
}
Tensors unary_backward_gelu_tanh(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  if (!c.create_graph) return {fused_grad(BinaryFn::GeluTanhGrad, c.grads[0], x)};
  const double k = 0.7978845608028654, a = 0.044715;
  Tensor t = tanh((x + x * x * x * a) * k);
  Tensor dinner = (x * x * (3 * a) + 1.0) * k;
  return {c.grads[0] * ((t + 1.0) * 0.5 + x * (1.0 - t * t) * dinner * 0.5)};
}
Tensors unary_backward_clamp(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  double lo = c.attrs.f("min"), hi = c.attrs.f("max");
  Tensor g = c.grads[0];  // the gradient passes where lo <= x <= hi
  if (!std::isnan(lo)) g = g * ones_mask(ge(x, scalar_like(x, lo)), x);
  if (!std::isnan(hi)) g = g * ones_mask(le(x, scalar_like(x, hi)), x);
  return {g};
}

// ---- binary ----

DType compute_dtype(BinaryFn fn, const Tensor& a, const Tensor& b) {
  OpId op = op_of(fn);
  DType dt = promote(a.dtype(), b.dtype());
  FG_CHECK(!(in_group(op, Group::Bitwise) && is_floating(dt)), DType, op_name(op),
           ": expected bool or integer tensors, got ", describe(a), " and ", describe(b),
           "; compare first (x > 0) or cast with .int()");
  FG_CHECK(!(in_group(op, Group::Arithmetic) && dt == DType::Bool), DType, op_name(op),
           ": arithmetic on two bool tensors is not defined (got ", describe(a), " and ",
           describe(b), "); cast with .int() or .float() first");
  return in_group(op, Group::FloatOnly) ? float_result(dt) : dt;
}

template <BinaryFn Fn>
Specs binary_shape(TensorList in, const Attrs&) {
  Dims shape = raw::broadcast_shapes(in[0].shape(), in[1].shape(), op_name(op_of(Fn)).data());
  DType dt = compute_dtype(Fn, in[0], in[1]);
  return {{shape, in_group(op_of(Fn), Group::Comparison) ? DType::Bool : dt}};
}

// Both inputs in the compute dtype (a comparison's result is bool, so not the output's).
template <BinaryFn Fn>
Promotion binary_promotion(TensorList in, const Specs& specs, const Attrs&) {
  if constexpr (in_group(op_of(Fn), Group::Comparison)) return {compute_dtype(Fn, in[0], in[1]), 3u};
  return {specs[0].dtype, 3u};
}

// The inputs have the compute dtype (Promote): input 0's.
template <BinaryFn Fn, decltype(&binary_cpu) Run>
void binary_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) {
  DType dt = in[0].dtype();
  FG_ASSERT(in[1].dtype() == dt);
  Run(env, Fn, dt, raw::strided_over<3>(out[0].shape(), {&out[0], &in[0], &in[1]}));
}

template <BinaryFn Fn, decltype(&binary_cpu) Run>
Launch binary_prepare(TensorList in, const Tensors& out, const Attrs&) {
  DType dt = in[0].dtype();
  FG_ASSERT(in[1].dtype() == dt);
  struct Args {
    DType dtype;
    Strided<3> s;  // (out, a, b)
  };
  auto args = std::make_shared<Args>(Args{dt, raw::strided_over<3>(out[0].shape(), {&out[0], &in[0], &in[1]})});
  return {[](const void* p, const KernelEnv& env) {
            auto* a = static_cast<const Args*>(p);
            Run(env, Fn, a->dtype, a->s);
          }, args};
}

Tensors binary_backward_add(const BackwardCtx& c) {
  return {sum_to(c.grads[0], c.input_specs[0].shape), sum_to(c.grads[0], c.input_specs[1].shape)};
}
Tensors binary_backward_sub(const BackwardCtx& c) {
  return {sum_to(c.grads[0], c.input_specs[0].shape), sum_to(-c.grads[0], c.input_specs[1].shape)};
}
Tensors binary_backward_mul(const BackwardCtx& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  return {c.needs_grad[0] ? sum_to(g * b, a.shape()) : Tensor(),
          c.needs_grad[1] ? sum_to(g * a, b.shape()) : Tensor()};
}
Tensors binary_backward_div(const BackwardCtx& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  return {c.needs_grad[0] ? sum_to(g / b, a.shape()) : Tensor(),
          c.needs_grad[1] ? sum_to(-(g * a / (b * b)), b.shape()) : Tensor()};
}
Tensors binary_backward_pow(const BackwardCtx& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0], &y = c.outputs[0];
  Tensors grads(2);
  if (c.needs_grad[0]) {  // in the gradient's dtype: a bool or integer exponent has no b - 1
    Tensor e = cast(b, g.dtype());
    grads[0] = sum_to(g * e * pow(a, e - 1.0), a.shape());
  }
  if (c.needs_grad[1]) {  // d/db a^b = a^b log a; taken as 0 where a == 0 (the limit for b > 0)
    Tensor base = cast(a, g.dtype());  // a bool or integer base
    Tensor safe_log = log(where(eq(base, scalar_like(base, 0)), scalar_like(base, 1), base));
    grads[1] = sum_to(g * y * safe_log, b.shape());
  }
  return grads;
}
// maximum/minimum: the gradient goes to the chosen input, split evenly on ties.
Tensors select_backward(const BackwardCtx& c, bool is_max) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  Tensor wins = ones_mask(is_max ? gt(a, b) : lt(a, b), g) + ones_mask(eq(a, b), g) * 0.5;
  return {sum_to(g * wins, a.shape()), sum_to(g * (1.0 - wins), b.shape())};
}
Tensors binary_backward_maximum(const BackwardCtx& c) { return select_backward(c, true); }
Tensors binary_backward_minimum(const BackwardCtx& c) { return select_backward(c, false); }

// The FG_UNARY and FG_BINARY rows of the op table (ops.def): one OpDef each over the kernels of
// its function, with the backward rule <unary|binary>_backward_<name> above, or none and a reason.
using BackwardRule = Tensors (*)(const BackwardCtx&);
template <UnaryFn Fn>
constexpr OpDef unary_def(BackwardRule backward, Saved saved, const char* not_differentiable) {
  return {.id = op_of(Fn), .name = op_name(op_of(Fn)).data(), .family = Family::Unary,
          .shape_rule = unary_shape<Fn>, .promotion = unary_promotion, .cpu = unary_kernel<Fn, unary_cpu>,
          .cuda = FG_CUDA((unary_kernel<Fn, unary_cuda>)), .backward = backward,
          .not_differentiable = not_differentiable, .saved = saved, .prepare_cpu = unary_prepare<Fn, unary_cpu>,
          .prepare_cuda = FG_CUDA((unary_prepare<Fn, unary_cuda>)), .functor = static_cast<int>(Fn)};
}
template <BinaryFn Fn>
constexpr OpDef binary_def(BackwardRule backward, Saved saved, const char* not_differentiable) {
  return {.id = op_of(Fn), .name = op_name(op_of(Fn)).data(), .family = Family::Binary,
          .shape_rule = binary_shape<Fn>, .promotion = binary_promotion<Fn>, .cpu = binary_kernel<Fn, binary_cpu>,
          .cuda = FG_CUDA((binary_kernel<Fn, binary_cuda>)), .backward = backward,
          .not_differentiable = not_differentiable, .saved = saved, .prepare_cpu = binary_prepare<Fn, binary_cpu>,
          .prepare_cuda = FG_CUDA((binary_prepare<Fn, binary_cuda>)), .functor = static_cast<int>(Fn)};
}
#define FG_UNARY(NAME, FN, GROUPS, AUTOCAST, API, SAVED, DOC) \
  constexpr OpDef k_##NAME = unary_def<UnaryFn::FN>(unary_backward_##NAME, Saved::SAVED, nullptr);
#define FG_UNARY_NODIFF(NAME, FN, GROUPS, AUTOCAST, API, REASON, DOC) \
  constexpr OpDef k_##NAME = unary_def<UnaryFn::FN>(nullptr, Saved::Nothing, REASON);
#define FG_BINARY(NAME, FN, GROUPS, AUTOCAST, API, SAVED, DOC) \
  constexpr OpDef k_##NAME = binary_def<BinaryFn::FN>(binary_backward_##NAME, Saved::SAVED, nullptr);
#define FG_BINARY_NODIFF(NAME, FN, GROUPS, AUTOCAST, API, REASON, DOC) \
  constexpr OpDef k_##NAME = binary_def<BinaryFn::FN>(nullptr, Saved::Nothing, REASON);
#include "flowgrad/base/ops.def"

// ---- where, cast ----

Specs where_shape(TensorList in, const Attrs&) {
  FG_CHECK(in[0].dtype() == DType::Bool, DType, "where: condition must be bool, got ",
           describe(in[0]));
  Dims shape = raw::broadcast_shapes(raw::broadcast_shapes(in[0].shape(), in[1].shape(), "where"),
                                in[2].shape(), "where");
  return {{shape, promote(in[1].dtype(), in[2].dtype())}};
}
// The two value inputs in the result's dtype.
Promotion where_promotion(TensorList, const Specs& specs, const Attrs&) { return {specs[0].dtype, 6u}; }
template <decltype(&where_cpu) Run>
void where_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) {
  DType dt = out[0].dtype();
  FG_ASSERT(in[1].dtype() == dt && in[2].dtype() == dt);
  Run(env, dt, raw::strided_over<4>(out[0].shape(), {&out[0], &in[0], &in[1], &in[2]}));
}
Tensors where_backward(const BackwardCtx& c) {
  const Tensor &cond = c.inputs[0], &g = c.grads[0];
  Tensor zero = scalar_like(g, 0);
  return {Tensor(), sum_to(where(cond, g, zero), c.input_specs[1].shape),
          sum_to(where(cond, zero, g), c.input_specs[2].shape)};
}
const OpDef k_where{.id = OpId::where, .name = "where", .family = Family::Ternary, .flags = kHalfNative,
                    .shape_rule = where_shape, .promotion = where_promotion, .cpu = where_kernel<where_cpu>,
                    .cuda = FG_CUDA(where_kernel<where_cuda>), .backward = where_backward,
                    .saved = Saved::Inputs, .nondiff_inputs = 1u};

Specs cast_shape(TensorList in, const Attrs& attrs) {
  return {{in[0].shape(), attrs.get<DType>("dtype")}};
}
void cast_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) { raw::copy_into(env, out[0], in[0]); }
Tensors cast_backward(const BackwardCtx& c) { return {cast(c.grads[0], c.input_specs[0].dtype)}; }
const OpDef k_cast{.id = OpId::cast, .name = "cast", .family = Family::Unary, .flags = kHalfNative,
                   .shape_rule = cast_shape, .cpu = cast_kernel, .cuda = FG_CUDA(cast_kernel),
                   .backward = cast_backward};

// ---- in-place twins: the same rule, kernels and backward, writing into input 0 (see run_op) ----

OpDef in_place(OpDef op, OpId id, uint32_t flags) {
  op.id = id;
  op.name = op_name(id).data();
  op.flags = flags | (op.flags & kHalfNative);
  return op;
}
const OpDef k_add_ = in_place(k_add, OpId::add_, 0);
const OpDef k_sub_ = in_place(k_sub, OpId::sub_, 0);
const OpDef k_mul_ = in_place(k_mul, OpId::mul_, kSavesOriginal);
const OpDef k_div_ = in_place(k_div, OpId::div_, kSavesOriginal);
const OpDef k_pow_ = in_place(k_pow, OpId::pow_, kSavesOriginal);
const OpDef k_neg_ = in_place(k_neg, OpId::neg_, 0);
const OpDef k_relu_ = in_place(k_relu, OpId::relu_, kSavesOriginal);
const OpDef k_clamp_ = in_place(k_clamp, OpId::clamp_, kSavesOriginal);

}  // namespace

// Registration of this file's rows of the op table (ops.def).
#define FG_UNARY(NAME, FN, GROUPS, AUTOCAST, API, SAVED, DOC) FG_REGISTER(NAME);
#define FG_BINARY(NAME, FN, GROUPS, AUTOCAST, API, SAVED, DOC) FG_REGISTER(NAME);
#include "flowgrad/base/ops.def"
FG_REGISTER(where);
FG_REGISTER(cast);
FG_REGISTER(add_);
FG_REGISTER(sub_);
FG_REGISTER(mul_);
FG_REGISTER(div_);
FG_REGISTER(pow_);
FG_REGISTER(neg_);
FG_REGISTER(relu_);
FG_REGISTER(clamp_);

// The functions of the rows whose api is Generated.
#define FG_UNARY(NAME, FN, GROUPS, AUTOCAST, API, SAVED, DOC) FG_UNARY_FUNCTION_##API(NAME)
#define FG_UNARY_FUNCTION_Generated(NAME) \
  Tensor NAME(const Tensor& x) { return run_op1(k_##NAME, {x}); }
#define FG_UNARY_FUNCTION_Bound(NAME)
#define FG_UNARY_FUNCTION_Hand(NAME)
#define FG_BINARY(NAME, FN, GROUPS, AUTOCAST, API, SAVED, DOC) FG_BINARY_FUNCTION_##API(NAME)
#define FG_BINARY_FUNCTION_Generated(NAME) \
  Tensor NAME(const Tensor& a, const Tensor& b) { return run_op1(k_##NAME, {a, b}); }
#define FG_BINARY_FUNCTION_Bound(NAME)
#define FG_BINARY_FUNCTION_Hand(NAME)
#include "flowgrad/base/ops.def"
#undef FG_UNARY_FUNCTION_Generated
#undef FG_UNARY_FUNCTION_Bound
#undef FG_UNARY_FUNCTION_Hand
#undef FG_BINARY_FUNCTION_Generated
#undef FG_BINARY_FUNCTION_Bound
#undef FG_BINARY_FUNCTION_Hand

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  return run_op1(tanh_approximation ? k_gelu_tanh : k_gelu, {x});
}
namespace {
Tensor fused_grad(BinaryFn fn, const Tensor& g, const Tensor& saved) {
  switch (fn) {
    case BinaryFn::GeluGrad: return run_op1(k_gelu_backward, {g, saved});
    case BinaryFn::GeluTanhGrad: return run_op1(k_gelu_tanh_backward, {g, saved});
    case BinaryFn::ReluGrad: return run_op1(k_relu_backward, {g, saved});
    case BinaryFn::TanhGrad: return run_op1(k_tanh_backward, {g, saved});
    case BinaryFn::SigmoidGrad: return run_op1(k_sigmoid_backward, {g, saved});
    case BinaryFn::SiluGrad: return run_op1(k_silu_backward, {g, saved});
    default: FG_ASSERT(false && "not an activation gradient");
  }
  return {};
}
}  // namespace
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  return run_op1(k_clamp, {x}, {{"min", lo.value_or(kNaN)}, {"max", hi.value_or(kNaN)}});
}
Tensor pow(const Tensor& a, const Tensor& b) {
  // NumPy raises rather than truncating 2 ** -1 to 0. Reading the exponents is a host sync on
  // CUDA, paid by integer powers only.
  if (is_integral(promote(a.dtype(), b.dtype())) && b.dtype() != DType::Bool && b.numel() > 0)
    FG_CHECK(item(amin(b, Dims{}, false)) >= 0, Value, "pow: integers to negative integer powers are not ",
             "allowed (exponent ", describe(b), " has a negative value); use a float base");
  return run_op1(k_pow, {a, b});
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return bitwise_and(cast(a, DType::Bool), cast(b, DType::Bool));
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return bitwise_or(cast(a, DType::Bool), cast(b, DType::Bool));
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return bitwise_xor(cast(a, DType::Bool), cast(b, DType::Bool));
}
Tensor logical_not(const Tensor& x) { return bitwise_not(cast(x, DType::Bool)); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return run_op1(k_where, {cond, a, b});
}
Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return run_op1(k_cast, {x}, {{"dtype", dtype}});
}
Tensor add_(const Tensor& x, const Tensor& other) { return run_op1(k_add_, {x, other}); }
Tensor sub_(const Tensor& x, const Tensor& other) { return run_op1(k_sub_, {x, other}); }
Tensor mul_(const Tensor& x, const Tensor& other) { return run_op1(k_mul_, {x, other}); }
Tensor div_(const Tensor& x, const Tensor& other) { return run_op1(k_div_, {x, other}); }
Tensor pow_(const Tensor& x, const Tensor& other) { return run_op1(k_pow_, {x, other}); }
Tensor neg_(const Tensor& x) { return run_op1(k_neg_, {x}); }
Tensor relu_(const Tensor& x) { return run_op1(k_relu_, {x}); }
Tensor clamp_(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  return run_op1(k_clamp_, {x}, {{"min", lo.value_or(kNaN)}, {"max", hi.value_or(kNaN)}});
}
Tensor scalar_like(const Tensor& x, double value) {
  return full(Dims{}, value, x.dtype(), x.device());
}

}  // namespace fg
