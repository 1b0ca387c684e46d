// nn ops with fused forward kernels: softmax, log_softmax, layer_norm, add_layer_norm, rms_norm,
// im2col/col2im.
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/conv/im2col.h"
#include "kernels/nn/nn.h"

namespace fg {
namespace {

void check_float(const Tensor& x, const char* op) {
  FG_CHECK(is_floating(x.dtype()), DType, op, ": expected a floating tensor, got ", describe(x));
}

// ---- softmax / log_softmax over one dim ----
// attrs: dim, log, scale (input multiplier) and causal (attention scores (..., L, S) along the
// last dim: key j > query i is masked).
Specs softmax_shape(TensorList in, const Attrs& attrs) {
  const char* op = attrs.b("log") ? "log_softmax" : "softmax";
  check_float(in[0], op);
  int dim = wrap_dim(attrs.i("dim"), in[0].ndim(), op, ScalarDim::AsSingleElement);
  FG_CHECK(!attrs.b("causal") || (in[0].ndim() >= 2 && dim == in[0].ndim() - 1), Shape, op,
           ": a causal mask needs scores (..., L, S) normalised over the last dim, got ",
           to_string(in[0].shape()));
  return {{in[0].shape(), in[0].dtype()}};
}
template <decltype(&softmax_cpu) Run>
void softmax_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  int dim = wrap_dim(attrs.i("dim"), x.ndim(), "softmax", ScalarDim::AsSingleElement);
  int64_t r = x.ndim() ? x.shape()[dim] : 1;
  int64_t causal_rows = attrs.b("causal") ? x.shape()[x.ndim() - 2] : 0;
  Run(env, x.dtype(), attrs.b("log"), x.data_ptr(), raw::span(x.shape(), 0, dim), r,
              raw::span(x.shape(), dim + 1, x.ndim()), out[0].data_ptr(), attrs.f("scale"), causal_rows);
}
// Masked entries have y = 0 (softmax), so they receive no gradient.
Tensors softmax_backward(const BackwardCtx& c) {
  const Tensor &y = c.outputs[0], &g = c.grads[0];
  Dims dim{c.attrs.i("dim")};
  double scale = c.attrs.f("scale");
  Tensor dx = c.attrs.b("log") ? g - exp(y) * sum(g, dim, true) : y * (g - sum(g * y, dim, true));
  return {scale == 1.0 ? dx : dx * scale};
}
const OpDef k_softmax{.id = OpId::softmax, .name = "softmax", .family = Family::NN, .shape_rule = softmax_shape,
                      .cpu = softmax_kernel<softmax_cpu>,
                      .cuda = FG_CUDA(softmax_kernel<softmax_cuda>), .backward = softmax_backward, .saved = Saved::Outputs};

// ---- layer_norm / rms_norm over the trailing `normalized_ndim` dims ----
// Inputs: x, then weight if has_weight, then bias if has_bias. Outputs: y and per-row
// statistics (mean and rstd for layer_norm, rstd for rms_norm) shaped to broadcast against x.
// add_layer_norm: x, the residual, weight, bias; outputs s = x + residual, then layer_norm's of s.
// The weight and bias are in[first:].
Specs norm_specs(const char* op, TensorList in, size_t first, const Attrs& attrs, bool rms) {
  const Tensor& x = in[0];
  check_float(x, op);
  const Dims& norm = attrs.dims("normalized_shape");
  int k = norm.size();
  bool matches = k >= 1 && k <= x.ndim();
  for (int i = 0; matches && i < k; ++i) matches = x.shape()[x.ndim() - k + i] == norm[i];
  FG_CHECK(matches, Shape, op, ": normalized_shape ", to_string(norm),
           " must equal the trailing dims of the input ", to_string(x.shape()));
  for (size_t i = first; i < in.size(); ++i)
    FG_CHECK(in[i].shape() == norm, Shape, op, ": ", i == first && attrs.b("has_weight") ? "weight" : "bias",
             " has shape ", to_string(in[i].shape()), ", expected ", to_string(norm));
  Dims stats = x.shape();
  for (int i = 0; i < k; ++i) stats[x.ndim() - k + i] = 1;
  Specs specs{{x.shape(), x.dtype()}, {stats, x.dtype()}};
  if (!rms) specs.push_back({stats, x.dtype()});
  return specs;
}
Specs layer_norm_shape(TensorList in, const Attrs& attrs) { return norm_specs("layer_norm", in, 1, attrs, false); }
Specs rms_norm_shape(TensorList in, const Attrs& attrs) { return norm_specs("rms_norm", in, 1, attrs, true); }
Specs add_layer_norm_shape(TensorList in, const Attrs& attrs) {
  const Tensor &x = in[0], &r = in[1];
  FG_CHECK(r.shape() == x.shape(), Shape, "add_layer_norm: input ", to_string(x.shape()), " and residual ",
           to_string(r.shape()), " must have the same shape");
  FG_CHECK(r.dtype() == x.dtype(), DType, "add_layer_norm: input and residual must have one dtype, got ", describe(x),
           " and ", describe(r));
  Specs norm = norm_specs("add_layer_norm", in, 2, attrs, false);
  return {{x.shape(), x.dtype()}, norm[0], norm[1], norm[2]};
}

// The weight and bias (inputs `first` on) in the input's dtype (Promote).
template <size_t First>
Promotion norm_promotion(TensorList in, const Specs& specs, const Attrs&) {
  return {specs[0].dtype, ((1u << in.size()) - 1) & ~((1u << First) - 1)};
}
// norm_backward's weight (input 2, when it has one) in the input's dtype.
Promotion norm_backward_promotion(TensorList in, const Specs&, const Attrs& attrs) {
  return {in[1].dtype(), attrs.b("has_weight") ? 4u : 0u};
}

struct NormArgs {
  Tensor x, weight, bias;
  int64_t rows, cols;
};
NormArgs norm_args(const KernelEnv& env, TensorList in, const Attrs& attrs, DType dt, size_t first = 1) {  // weight, bias at in[first:]
  NormArgs a;
  a.x = raw::contiguous(env, in[0]);
  size_t next = first;
  for (size_t i = first; i < in.size(); ++i) FG_ASSERT(in[i].dtype() == dt);
  if (attrs.b("has_weight")) a.weight = raw::contiguous(env, in[next++]);
  if (attrs.b("has_bias")) a.bias = raw::contiguous(env, in[next++]);
  a.cols = attrs.dims("normalized_shape").numel();
  a.rows = a.cols ? a.x.numel() / a.cols : 0;
  return a;
}
const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

template <decltype(&layer_norm_cpu) Run>
void layer_norm_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  NormArgs a = norm_args(env, in, attrs, out[0].dtype());
  Run(env, a.x.dtype(), a.x.data_ptr(), ptr_or_null(a.weight), ptr_or_null(a.bias), a.rows,
                 a.cols, attrs.f("eps"), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}
template <decltype(&add_layer_norm_cpu) Run>
void add_layer_norm_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  NormArgs a = norm_args(env, in, attrs, out[0].dtype(), 2);
  Tensor r = raw::contiguous(env, in[1]);
  Run(env, a.x.dtype(), a.x.data_ptr(), r.data_ptr(), ptr_or_null(a.weight), ptr_or_null(a.bias), a.rows, a.cols,
      attrs.f("eps"), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr(), out[3].data_ptr());
}
template <decltype(&rms_norm_cpu) Run>
void rms_norm_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  NormArgs a = norm_args(env, in, attrs, out[0].dtype());
  Run(env, a.x.dtype(), a.x.data_ptr(), ptr_or_null(a.weight), a.rows, a.cols, attrs.f("eps"),
               out[0].data_ptr(), out[1].data_ptr());
}

Dims trailing_dims(const BackwardCtx& c) {
  int rank = c.input_specs[0].shape.size(), k = c.attrs.dims("normalized_shape").size();
  Dims dims;
  for (int d = rank - k; d < rank; ++d) dims.push_back(d);
  return dims;
}

// Shared by layer_norm and rms_norm: given xhat (normalised input) and rstd, the gradients of
// x, weight and bias. With create_graph the statistics are recomputed from x by public ops, so
// that second-order gradients see how they depend on x. A defined `residual` (a gradient of x's
// shape) is added to x's gradient.
Tensors norm_backward_fused(const BackwardCtx& c, bool rms, const Tensor& residual);

Tensors norm_backward(const BackwardCtx& c, bool rms, const Tensor& residual = Tensor()) {
  if (!c.create_graph) return norm_backward_fused(c, rms, residual);
  const Tensor& x = c.inputs[0];
  const Tensor& g = c.grads[0];
  Dims dims = trailing_dims(c);
  double eps = c.attrs.f("eps");
  Tensor centered = rms ? x : x - (c.create_graph ? mean(x, dims, true) : c.outputs[1]);
  Tensor rstd = c.create_graph
                    ? rsqrt(mean(centered * centered, dims, true) + eps)
                    : c.outputs[rms ? 1 : 2];
  Tensor xhat = centered * rstd;
  bool has_w = c.attrs.b("has_weight"), has_b = c.attrs.b("has_bias");
  Tensor gxh = has_w ? g * c.inputs[1] : g;
  Tensor inner = rms ? gxh - xhat * mean(gxh * xhat, dims, true)
                     : gxh - mean(gxh, dims, true) - xhat * mean(gxh * xhat, dims, true);
  Tensors grads{c.needs_grad[0] ? (residual.defined() ? rstd * inner + residual : rstd * inner) : Tensor()};
  if (has_w) grads.push_back(c.needs_grad[1] ? sum_to(g * xhat, c.input_specs[1].shape) : Tensor());
  if (has_b) grads.push_back(sum_to(g, c.input_specs[grads.size()].shape));
  return grads;
}
Tensors layer_norm_backward(const BackwardCtx& c) { return norm_backward(c, false); }
Tensors rms_norm_backward(const BackwardCtx& c) { return norm_backward(c, true); }

// add_layer_norm: layer_norm's rule over (s, [weight], [bias]), with s's own gradient added to the
// norm's; x and the residual both receive the sum. With create_graph s is recomputed as
// x + residual, so that second-order gradients reach both.
Tensors add_layer_norm_backward(const BackwardCtx& c) {
  Tensors inputs{c.create_graph ? c.inputs[0] + c.inputs[1] : c.outputs[0]};
  inputs.insert(inputs.end(), c.inputs.begin() + 2, c.inputs.end());
  Tensors outputs(c.outputs.begin() + 1, c.outputs.end()), grads(c.grads.begin() + 1, c.grads.end());
  SpecList specs{c.input_specs[0]};
  specs.insert(specs.end(), c.input_specs.begin() + 2, c.input_specs.end());
  std::vector<bool> needs{c.needs_grad[0] || c.needs_grad[1]};
  needs.insert(needs.end(), c.needs_grad.begin() + 2, c.needs_grad.end());
  Tensors norm = norm_backward({c.attrs, inputs, outputs, specs, grads, needs, c.create_graph}, false, c.grads[0]);
  Tensors out{c.needs_grad[0] ? norm[0] : Tensor(), c.needs_grad[1] ? norm[0] : Tensor()};
  out.insert(out.end(), norm.begin() + 1, norm.end());
  return out;
}

// ---- the fused first-order backward: (g, x, [weight], [mean], rstd, [residual]) -> (dx, dweight, dbias) ----
// dweight and dbias are the (cols) column sums of g * xhat and g. attrs: rms, has_weight, cols,
// accumulate (the residual, a gradient of x's shape, is added to dx: the plan's fuse_add_norm
// pass or add_layer_norm's rule).
Specs norm_backward_shape(TensorList in, const Attrs& attrs) {
  FG_CHECK(!attrs.b("accumulate") || in[in.size() - 1].shape() == in[1].shape(), Shape,
           "norm_backward: residual gradient ", to_string(in[in.size() - 1].shape()), " does not match the input ",
           to_string(in[1].shape()));
  Dims cols{attrs.i("cols")};
  return {{in[1].shape(), in[1].dtype()}, {cols, in[1].dtype()}, {cols, in[1].dtype()}};
}
template <decltype(&norm_backward_cpu) Run>
void norm_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  bool rms = attrs.b("rms"), has_w = attrs.b("has_weight");
  Tensor g = raw::contiguous(env, in[0]), x = raw::contiguous(env, in[1]);
  size_t next = 2;
  FG_ASSERT(!has_w || in[next].dtype() == x.dtype());
  Tensor w = has_w ? raw::contiguous(env, in[next++]) : Tensor();
  Tensor mean = rms ? Tensor() : raw::contiguous(env, in[next++]);
  Tensor rstd = raw::contiguous(env, in[next]);
  Tensor residual = attrs.b("accumulate") ? raw::contiguous(env, in[next + 1]) : Tensor();
  int64_t cols = attrs.i("cols"), rows = cols ? x.numel() / cols : 0;
  Run(env, x.dtype(), rms, g.data_ptr(), x.data_ptr(), ptr_or_null(w), ptr_or_null(mean), rstd.data_ptr(),
      ptr_or_null(residual), rows, cols, out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}
const OpDef k_norm_backward{.id = OpId::norm_backward, .name = "norm_backward", .family = Family::NN,
                            .shape_rule = norm_backward_shape, .promotion = norm_backward_promotion,
                            .cpu = norm_backward_kernel<norm_backward_cpu>,
                            .cuda = FG_CUDA(norm_backward_kernel<norm_backward_cuda>),
                            .not_differentiable = "used for first-order gradients only; second order uses the composite rule"};

Tensors norm_backward_fused(const BackwardCtx& c, bool rms, const Tensor& residual) {
  bool has_w = c.attrs.b("has_weight"), has_b = c.attrs.b("has_bias");
  Tensors in{c.grads[0], c.inputs[0]};
  if (has_w) in.push_back(c.inputs[1]);
  if (!rms) in.push_back(c.outputs[1]);
  in.push_back(c.outputs[rms ? 1 : 2]);
  if (residual.defined()) in.push_back(residual);
  Tensors out = run_op(k_norm_backward, in, {{"rms", rms}, {"has_weight", has_w},
                                             {"cols", c.attrs.dims("normalized_shape").numel()},
                                             {"accumulate", residual.defined()}});
  Tensors grads{c.needs_grad[0] ? out[0] : Tensor()};
  if (has_w) grads.push_back(c.needs_grad[1] ? reshape(out[1], c.input_specs[1].shape.vec()) : Tensor());
  if (has_b) grads.push_back(reshape(out[2], c.input_specs[grads.size()].shape.vec()));
  return grads;
}

const OpDef k_layer_norm{.id = OpId::layer_norm, .name = "layer_norm", .family = Family::NN,
                         .shape_rule = layer_norm_shape, .promotion = norm_promotion<1>,
                         .cpu = layer_norm_kernel<layer_norm_cpu>, .cuda = FG_CUDA(layer_norm_kernel<layer_norm_cuda>),
                         .backward = layer_norm_backward,
                         .saved = Saved::InputsAndOutputs};
const OpDef k_add_layer_norm{.id = OpId::add_layer_norm, .name = "add_layer_norm", .family = Family::NN,
                             .shape_rule = add_layer_norm_shape, .promotion = norm_promotion<2>, .cpu = add_layer_norm_kernel<add_layer_norm_cpu>,
                             .cuda = FG_CUDA(add_layer_norm_kernel<add_layer_norm_cuda>),
                             .backward = add_layer_norm_backward, .saved = Saved::InputsAndOutputs};
const OpDef k_rms_norm{.id = OpId::rms_norm, .name = "rms_norm", .family = Family::NN, .shape_rule = rms_norm_shape, .promotion = norm_promotion<1>,
                       .cpu = rms_norm_kernel<rms_norm_cpu>, .cuda = FG_CUDA(rms_norm_kernel<rms_norm_cuda>),
                       .backward = rms_norm_backward,
                       .saved = Saved::InputsAndOutputs};

// ---- im2col / col2im ----
Conv2dGeometry geometry(const Dims& image, const Attrs& attrs) {
  Conv2dGeometry g{};
  g.n = image[0], g.c = image[1], g.h = image[2], g.w = image[3];
  g.kh = attrs.i("kh"), g.kw = attrs.i("kw");
  g.stride_h = g.stride_w = attrs.i("stride");
  g.pad_h = g.pad_w = attrs.i("padding");
  g.out_h = (g.h + 2 * g.pad_h - g.kh) / g.stride_h + 1;
  g.out_w = (g.w + 2 * g.pad_w - g.kw) / g.stride_w + 1;
  return g;
}
void check_geometry(const Dims& image, const Attrs& attrs, const char* op) {
  FG_CHECK(image.size() == 4, Shape, op, ": expected a (N, C, H, W) input, got ", to_string(image));
  FG_CHECK(attrs.i("kh") > 0 && attrs.i("kw") > 0 && attrs.i("stride") > 0 && attrs.i("padding") >= 0,
           Value, op, ": kernel size and stride must be positive and padding >= 0 (", attrs.str(), ")");
  FG_CHECK(image[2] + 2 * attrs.i("padding") >= attrs.i("kh") &&
               image[3] + 2 * attrs.i("padding") >= attrs.i("kw"),
           Shape, op, ": kernel ", attrs.i("kh"), "x", attrs.i("kw"), " is larger than the padded input ",
           to_string(image));
}
Specs im2col_shape(TensorList in, const Attrs& attrs) {
  check_geometry(in[0].shape(), attrs, "im2col");
  check_float(in[0], "im2col");
  Conv2dGeometry g = geometry(in[0].shape(), attrs);
  return {{Dims{g.n, g.c * g.kh * g.kw, g.out_h * g.out_w}, in[0].dtype()}};
}
template <decltype(&im2col_cpu) Run>
void im2col_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  Run(env, x.dtype(), geometry(x.shape(), attrs), x.data_ptr(), out[0].data_ptr());
}
Tensors im2col_backward(const BackwardCtx& c) {
  const Attrs& a = c.attrs;
  return {col2im(c.grads[0], c.input_specs[0].shape, a.i("kh"), a.i("kw"), a.i("stride"), a.i("padding"))};
}
const OpDef k_im2col{.id = OpId::im2col, .name = "im2col", .family = Family::NN, .shape_rule = im2col_shape,
                     .cpu = im2col_kernel<im2col_cpu>, .cuda = FG_CUDA(im2col_kernel<im2col_cuda>),
                     .backward = im2col_backward};

Specs col2im_shape(TensorList in, const Attrs& attrs) {
  const Dims& image = attrs.dims("image_shape");
  check_geometry(image, attrs, "col2im");
  check_float(in[0], "col2im");
  Conv2dGeometry g = geometry(image, attrs);
  Dims expected{g.n, g.c * g.kh * g.kw, g.out_h * g.out_w};
  FG_CHECK(in[0].shape() == expected, Shape, "col2im: columns ", to_string(in[0].shape()),
           " do not match image ", to_string(image), " (expected ", to_string(expected), ")");
  return {{image, in[0].dtype()}};
}
template <decltype(&col2im_cpu) Run>
void col2im_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor cols = raw::contiguous(env, in[0]);
  Run(env, cols.dtype(), geometry(out[0].shape(), attrs), cols.data_ptr(), out[0].data_ptr());
}
Tensors col2im_backward(const BackwardCtx& c) {
  const Attrs& a = c.attrs;
  return {im2col(c.grads[0], a.i("kh"), a.i("kw"), a.i("stride"), a.i("padding"))};
}
const OpDef k_col2im{.id = OpId::col2im, .name = "col2im", .family = Family::NN, .shape_rule = col2im_shape,
                     .cpu = col2im_kernel<col2im_cpu>, .cuda = FG_CUDA(col2im_kernel<col2im_cuda>),
                     .backward = col2im_backward};

Attrs conv_attrs(int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  return {{"kh", kh}, {"kw", kw}, {"stride", stride}, {"padding", padding}};
}

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(softmax);
FG_REGISTER(layer_norm);
FG_REGISTER(add_layer_norm);
FG_REGISTER(rms_norm);
FG_REGISTER(norm_backward);
FG_REGISTER(im2col);
FG_REGISTER(col2im);

Tensor softmax(const Tensor& x, int64_t dim) {
  return run_op1(k_softmax, {x}, {{"dim", dim}, {"log", false}, {"scale", 1.0}, {"causal", false}});
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return run_op1(k_softmax, {x}, {{"dim", dim}, {"log", true}, {"scale", 1.0}, {"causal", false}});
}
Tensor scaled_softmax(const Tensor& scores, double scale, bool causal) {
  return run_op1(k_softmax, {scores}, {{"dim", int64_t{-1}}, {"log", false}, {"scale", scale}, {"causal", causal}});
}
// `first` followed by weight and bias where defined (the norms' optional inputs). Reserved up
// front: GCC 12 warns (-Warray-bounds, a false positive) on a push_back that grows a vector made
// from an initializer list.
static Tensors with_defined(std::initializer_list<Tensor> first, const Tensor& weight, const Tensor& bias) {
  Tensors in;
  in.reserve(first.size() + 2);
  in.insert(in.end(), first.begin(), first.end());
  for (const Tensor* t : {&weight, &bias})
    if (t->defined()) in.push_back(*t);
  return in;
}
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  Tensors in = with_defined({x}, weight, bias);
  return run_op1(k_layer_norm, in, {{"normalized_shape", normalized_shape}, {"eps", eps},
                                    {"has_weight", weight.defined()}, {"has_bias", bias.defined()}});
}
Tensors add_layer_norm(const Tensor& x, const Tensor& residual, const Dims& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps) {
  Tensors in = with_defined({x, residual}, weight, bias);
  Tensors out = run_op(k_add_layer_norm, in, {{"normalized_shape", normalized_shape}, {"eps", eps},
                                              {"has_weight", weight.defined()}, {"has_bias", bias.defined()}});
  return {out[0], out[1]};
}
Tensor rms_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight, double eps) {
  Tensors in = with_defined({x}, weight, Tensor());
  return run_op1(k_rms_norm, in, {{"normalized_shape", normalized_shape}, {"eps", eps},
                                  {"has_weight", weight.defined()}, {"has_bias", false}});
}
Tensor im2col(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  return run_op1(k_im2col, {x}, conv_attrs(kh, kw, stride, padding));
}
Tensor col2im(const Tensor& cols, const Dims& image_shape, int64_t kh, int64_t kw, int64_t stride,
              int64_t padding) {
  Attrs attrs{{"kh", kh}, {"kw", kw}, {"stride", stride}, {"padding", padding},
              {"image_shape", image_shape}};
  return run_op1(k_col2im, {cols}, attrs);
}

}  // namespace fg
