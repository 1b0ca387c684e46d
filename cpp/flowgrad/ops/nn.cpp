// nn ops with fused forward kernels: softmax, log_softmax, layer_norm, add_layer_norm, rms_norm,
// im2col/col2im, conv2d and its two gradients, training batch_norm and its gradient,
// max_pool2d and its gradient (CPU).
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

// ---- conv2d (CPU): x (N, C, H, W), w (O, C, kh, kw) [, b (O)] -> (N, O, out_h, out_w) ----
// attrs: kh, kw, stride, padding (im2col's). Float32 or float64, every operand of one dtype;
// fg::conv2d composes im2col + matmul elsewhere (CUDA, half types, autocast).
void check_conv_operands(TensorList in, const char* op) {
  for (const Tensor& t : in)
    FG_CHECK(t.dtype() == in[0].dtype() && (t.dtype() == DType::Float32 || t.dtype() == DType::Float64), DType, op,
             ": expected float32 or float64 operands of one dtype, got ", describe(in[0]), " and ", describe(t));
}
Specs conv2d_shape(TensorList in, const Attrs& attrs) {
  const Dims &x = in[0].shape(), &w = in[1].shape();
  FG_CHECK(x.size() == 4 && w.size() == 4 && x[1] == w[1] && w[2] == attrs.i("kh") && w[3] == attrs.i("kw"), Shape,
           "conv2d: input ", to_string(x), " and weight ", to_string(w), " do not match (", attrs.str(), ")");
  FG_CHECK(in.size() < 3 || in[2].shape() == Dims{w[0]}, Shape, "conv2d: bias must be (", w[0], ",), got ",
           to_string(in[2].shape()));
  check_geometry(x, attrs, "conv2d");
  check_conv_operands(in, "conv2d");
  Conv2dGeometry g = geometry(x, attrs);
  return {{Dims{g.n, w[0], g.out_h, g.out_w}, in[0].dtype()}};
}
void conv2d_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]), w = raw::contiguous(env, in[1]);
  Tensor b = in.size() > 2 ? raw::contiguous(env, in[2]) : Tensor();
  conv2d_cpu(env, x.dtype(), geometry(x.shape(), attrs), w.shape()[0], x.data_ptr(), w.data_ptr(),
             b.defined() ? b.data_ptr() : nullptr, out[0].data_ptr());
}
Tensors conv2d_backward(const BackwardCtx& c) {
  const Attrs& a = c.attrs;
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  Tensors out(c.inputs.size());
  if (c.needs_grad[0]) out[0] = conv2d_input_grad(g, w, x.shape(), a.i("stride"), a.i("padding"));
  if (c.needs_grad[1]) out[1] = conv2d_weight_grad(x, g, w.shape(), a.i("stride"), a.i("padding"));
  if (c.inputs.size() > 2 && c.needs_grad[2]) out[2] = sum(g, Dims{0, 2, 3}, false);
  return out;
}
const OpDef k_conv2d{.id = OpId::conv2d, .name = "conv2d", .family = Family::NN, .shape_rule = conv2d_shape,
                     .cpu = conv2d_kernel,
                     .cuda_missing = "on CUDA fg::conv2d composes im2col and a cuBLAS GEMM",
                     .backward = conv2d_backward, .saved = Saved::Inputs};

// conv2d_input_grad: dy (N, O, out_h, out_w), w (O, C, kh, kw) -> dx (attr image_shape), the
// adjoint of conv2d in x (a transposed convolution). Linear in each operand, so its gradients are
// conv2d (for dy) and conv2d_weight_grad (for w).
Specs conv2d_input_grad_shape(TensorList in, const Attrs& attrs) {
  const Dims& image = attrs.dims("image_shape");
  const Dims &dy = in[0].shape(), &w = in[1].shape();
  check_geometry(image, attrs, "conv2d_input_grad");
  check_conv_operands(in, "conv2d_input_grad");
  Conv2dGeometry g = geometry(image, attrs);
  FG_CHECK(w.size() == 4 && image[1] == w[1] && w[2] == g.kh && w[3] == g.kw &&
               dy == (Dims{g.n, w[0], g.out_h, g.out_w}), Shape, "conv2d_input_grad: gradient ", to_string(dy),
           " and weight ", to_string(w), " do not match image ", to_string(image), " (", attrs.str(), ")");
  return {{image, in[0].dtype()}};
}
void conv2d_input_grad_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor dy = raw::contiguous(env, in[0]), w = raw::contiguous(env, in[1]);
  conv2d_input_grad_cpu(env, dy.dtype(), geometry(out[0].shape(), attrs), w.shape()[0], dy.data_ptr(),
                        w.data_ptr(), out[0].data_ptr());
}
Tensors conv2d_input_grad_backward(const BackwardCtx& c) {
  const Attrs& a = c.attrs;
  const Tensor &dy = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  Tensors out(2);
  if (c.needs_grad[0]) out[0] = conv2d(g, w, Tensor(), a.i("stride"), a.i("padding"));
  if (c.needs_grad[1]) out[1] = conv2d_weight_grad(g, dy, w.shape(), a.i("stride"), a.i("padding"));
  return out;
}
const OpDef k_conv2d_input_grad{.id = OpId::conv2d_input_grad, .name = "conv2d_input_grad", .family = Family::NN,
                                .shape_rule = conv2d_input_grad_shape, .cpu = conv2d_input_grad_kernel,
                                .cuda_missing = "on CUDA conv2d's gradient is col2im of a cuBLAS GEMM",
                                .backward = conv2d_input_grad_backward, .saved = Saved::Inputs};

// conv2d_weight_grad: x (N, C, H, W), dy (N, O, out_h, out_w) -> dw (attr weight_shape), the
// adjoint of conv2d in w. Its gradients: conv2d(x, G) for dy and conv2d_input_grad(dy, G) for x.
Specs conv2d_weight_grad_shape(TensorList in, const Attrs& attrs) {
  const Dims& w = attrs.dims("weight_shape");
  const Dims &x = in[0].shape(), &dy = in[1].shape();
  check_geometry(x, attrs, "conv2d_weight_grad");
  check_conv_operands(in, "conv2d_weight_grad");
  Conv2dGeometry g = geometry(x, attrs);
  FG_CHECK(w.size() == 4 && x[1] == w[1] && w[2] == g.kh && w[3] == g.kw &&
               dy == (Dims{g.n, w[0], g.out_h, g.out_w}), Shape, "conv2d_weight_grad: input ", to_string(x),
           " and gradient ", to_string(dy), " do not match weight ", to_string(w), " (", attrs.str(), ")");
  return {{w, in[0].dtype()}};
}
void conv2d_weight_grad_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]), dy = raw::contiguous(env, in[1]);
  conv2d_weight_grad_cpu(env, x.dtype(), geometry(x.shape(), attrs), out[0].shape()[0], x.data_ptr(),
                         dy.data_ptr(), out[0].data_ptr());
}
Tensors conv2d_weight_grad_backward(const BackwardCtx& c) {
  const Attrs& a = c.attrs;
  const Tensor &x = c.inputs[0], &dy = c.inputs[1], &g = c.grads[0];
  Tensors out(2);
  if (c.needs_grad[0]) out[0] = conv2d_input_grad(dy, g, x.shape(), a.i("stride"), a.i("padding"));
  if (c.needs_grad[1]) out[1] = conv2d(x, g, Tensor(), a.i("stride"), a.i("padding"));
  return out;
}
const OpDef k_conv2d_weight_grad{.id = OpId::conv2d_weight_grad, .name = "conv2d_weight_grad", .family = Family::NN,
                                 .shape_rule = conv2d_weight_grad_shape, .cpu = conv2d_weight_grad_kernel,
                                 .cuda_missing = "on CUDA conv2d's weight gradient is a cuBLAS GEMM of im2col's columns",
                                 .backward = conv2d_weight_grad_backward, .saved = Saved::Inputs};

// ---- batch_norm (training, CPU): x (N, C, *), then weight if has_weight, bias if has_bias (C) ----
// Outputs y (x's shape), the batch mean and the biased variance (C) each. attrs: eps, has_weight,
// has_bias. fg::batch_norm_train hands the statistics out detached, so only y carries a gradient.
struct ChannelLayout {
  int64_t n, c, hw;
};
ChannelLayout channel_layout(const Dims& x) {
  ChannelLayout l{x[0], x[1], 1};
  for (int64_t d = 2; d < static_cast<int64_t>(x.size()); ++d) l.hw *= x[d];
  return l;
}
Dims channel_dims(int64_t rank) {
  Dims dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}
Tensor per_channel(const Tensor& v, int64_t rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[1] = v.numel();
  return reshape(v, shape);
}
// in[first_param, end_param) are per-channel; every operand one float32/float64 dtype.
void check_batch_norm_operands(TensorList in, size_t first_param, size_t end_param, const char* op) {
  const Dims& x = in[0].shape();
  FG_CHECK(x.size() >= 2, Shape, op, ": expected an input (N, C, ...), got ", to_string(x));
  check_conv_operands(in, op);
  for (size_t i = first_param; i < end_param; ++i)
    FG_CHECK(in[i].shape() == Dims{x[1]}, Shape, op, ": per-channel operands must be (", x[1], ",), got ",
             to_string(in[i].shape()));
}
Specs batch_norm_shape(TensorList in, const Attrs& attrs) {
  check_batch_norm_operands(in, 1, in.size(), "batch_norm");
  const Dims& x = in[0].shape();
  return {{x, in[0].dtype()}, {Dims{x[1]}, in[0].dtype()}, {Dims{x[1]}, in[0].dtype()}};
}
void batch_norm_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  size_t next = 1;
  Tensor w = attrs.b("has_weight") ? raw::contiguous(env, in[next++]) : Tensor();
  Tensor b = attrs.b("has_bias") ? raw::contiguous(env, in[next++]) : Tensor();
  ChannelLayout l = channel_layout(x.shape());
  batch_norm_cpu(env, x.dtype(), x.data_ptr(), ptr_or_null(w), ptr_or_null(b), l.n, l.c, l.hw, attrs.f("eps"),
                 attrs.b("relu"), out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
}
// First order: the batch_norm_backward op (two passes over each channel's g and x). With
// create_graph, public ops from x again, so that second-order gradients see the statistics.
Tensors batch_norm_backward_rule(const BackwardCtx& c) {
  const Tensor& x = c.inputs[0];
  // with relu (a plan's fusion) y is the relu's output: relu_backward's rule first
  const Tensor g = c.attrs.b("relu") ? run_op1(*op_rows::relu_backward, {c.grads[0], c.outputs[0]}) : c.grads[0];
  bool has_w = c.attrs.b("has_weight"), has_b = c.attrs.b("has_bias");
  Tensor w = has_w ? c.inputs[1] : Tensor();
  Tensors grads;
  if (!c.create_graph) {
    Tensors in{g, x};
    if (has_w) in.push_back(w);
    in.push_back(c.outputs[1]), in.push_back(c.outputs[2]);
    Tensors d = batch_norm_backward(in, c.attrs.f("eps"), has_w);
    grads.push_back(c.needs_grad[0] ? d[0] : Tensor());
    if (has_w) grads.push_back(c.needs_grad[1] ? d[1] : Tensor());
    if (has_b) grads.push_back(d[2]);
    return grads;
  }
  const int64_t rank = x.ndim();
  Dims dims = channel_dims(rank);
  Tensor centered = x - mean(x, dims, true);
  Tensor rstd = rsqrt(mean(centered * centered, dims, true) + c.attrs.f("eps"));
  Tensor xhat = centered * rstd;
  Tensor gxh = has_w ? g * per_channel(w, rank) : g;
  grads.push_back(c.needs_grad[0] ? rstd * (gxh - mean(gxh, dims, true) - xhat * mean(gxh * xhat, dims, true))
                                  : Tensor());
  if (has_w) grads.push_back(c.needs_grad[1] ? sum(g * xhat, dims, false) : Tensor());
  if (has_b) grads.push_back(sum(g, dims, false));
  return grads;
}
const OpDef k_batch_norm{.id = OpId::batch_norm, .name = "batch_norm", .family = Family::NN,
                         .shape_rule = batch_norm_shape, .cpu = batch_norm_kernel,
                         .cuda_missing = "on CUDA BatchNorm composes reductions and elementwise ops",
                         .backward = batch_norm_backward_rule, .saved = Saved::InputsAndOutputs};

// batch_norm_backward: g, x, [weight], mean, var, and with relu the relu's output r (g then counts
// where r > 0: a plan's relu_backward fused in) -> dx, dweight, dbias (the last two (C) each;
// dweight the gradient of a weight of ones where there is none). First order only.
Specs batch_norm_backward_shape(TensorList in, const Attrs& attrs) {
  const bool relu = attrs.b("relu");
  check_batch_norm_operands(in, 2, in.size() - (relu ? 1 : 0), "batch_norm_backward");
  const Dims& x = in[1].shape();
  FG_CHECK(!relu || in[in.size() - 1].shape() == x, Shape, "batch_norm_backward: relu output ",
           to_string(in[in.size() - 1].shape()), " does not match input ", to_string(x));
  FG_CHECK(in[0].shape() == x, Shape, "batch_norm_backward: gradient ", to_string(in[0].shape()),
           " does not match input ", to_string(x));
  return {{x, in[0].dtype()}, {Dims{x[1]}, in[0].dtype()}, {Dims{x[1]}, in[0].dtype()}};
}
void batch_norm_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor g = raw::contiguous(env, in[0]), x = raw::contiguous(env, in[1]);
  size_t next = 2;
  Tensor w = attrs.b("has_weight") ? raw::contiguous(env, in[next++]) : Tensor();
  Tensor m = raw::contiguous(env, in[next]), v = raw::contiguous(env, in[next + 1]);
  Tensor r = attrs.b("relu") ? raw::contiguous(env, in[next + 2]) : Tensor();
  ChannelLayout l = channel_layout(x.shape());
  batch_norm_backward_cpu(env, x.dtype(), g.data_ptr(), ptr_or_null(r), x.data_ptr(), ptr_or_null(w), m.data_ptr(),
                          v.data_ptr(), l.n, l.c, l.hw, attrs.f("eps"), out[0].data_ptr(), out[1].data_ptr(),
                          out[2].data_ptr());
}
const OpDef k_batch_norm_backward{
    .id = OpId::batch_norm_backward, .name = "batch_norm_backward", .family = Family::NN,
    .shape_rule = batch_norm_backward_shape, .cpu = batch_norm_backward_kernel,
    .cuda_missing = "on CUDA BatchNorm composes reductions and elementwise ops",
    .not_differentiable = "first order only: with create_graph batch_norm's rule composes public ops instead"};

// ---- max_pool2d (CPU): x (N, C, H, W) -> {y, index} (N, C, out_h, out_w), attrs kh, kw, stride,
// padding (0). index: the flat position in its plane of each window's first maximum (int64).
Specs max_pool2d_shape(TensorList in, const Attrs& attrs) {
  check_geometry(in[0].shape(), attrs, "max_pool2d");
  check_conv_operands(in, "max_pool2d");
  Conv2dGeometry g = geometry(in[0].shape(), attrs);
  Dims out{g.n, g.c, g.out_h, g.out_w};
  return {{out, in[0].dtype()}, {out, DType::Int64}};
}
void max_pool2d_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor x = raw::contiguous(env, in[0]);
  max_pool2d_cpu(env, x.dtype(), geometry(x.shape(), attrs), x.data_ptr(), out[0].data_ptr(),
                 static_cast<int64_t*>(out[1].data_ptr()));
}
Tensors max_pool2d_backward_rule(const BackwardCtx& c) {
  const Attrs& a = c.attrs;
  return {max_pool2d_backward(c.grads[0], c.outputs[1], c.input_specs[0].shape, a.i("kh"), a.i("stride"))};
}
const OpDef k_max_pool2d{.id = OpId::max_pool2d, .name = "max_pool2d", .family = Family::NN,
                         .shape_rule = max_pool2d_shape, .cpu = max_pool2d_kernel,
                         .cuda_missing = "on CUDA max_pool2d reduces im2col's columns with amax",
                         .backward = max_pool2d_backward_rule, .saved = Saved::Outputs};

// max_pool2d_backward: g (N, C, out_h, out_w), index (int64, the same shape) -> dx (attr
// image_shape): g added at each index. Linear in g; its gradient gathers at the indices.
Specs max_pool2d_backward_shape(TensorList in, const Attrs& attrs) {
  const Dims& image = attrs.dims("image_shape");
  check_geometry(image, attrs, "max_pool2d_backward");
  check_conv_operands({in[0]}, "max_pool2d_backward");
  Conv2dGeometry g = geometry(image, attrs);
  Dims out{g.n, g.c, g.out_h, g.out_w};
  FG_CHECK(in[0].shape() == out && in[1].shape() == out && in[1].dtype() == DType::Int64, Shape,
           "max_pool2d_backward: gradient ", to_string(in[0].shape()), " and index ", describe(in[1]),
           " do not match image ", to_string(image), " (", attrs.str(), ")");
  return {{image, in[0].dtype()}};
}
void max_pool2d_backward_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  Tensor g = raw::contiguous(env, in[0]), index = raw::contiguous(env, in[1]);
  max_pool2d_backward_cpu(env, g.dtype(), geometry(out[0].shape(), attrs), g.data_ptr(),
                          static_cast<const int64_t*>(index.data_ptr()), out[0].data_ptr());
}
Tensors max_pool2d_backward_backward(const BackwardCtx& c) {
  const Tensor& index = c.inputs[1];
  const Dims& image = c.attrs.dims("image_shape");
  Tensor planes = reshape(c.grads[0], {image[0], image[1], -1});
  Tensor taken = gather(planes, 2, reshape(index, {image[0], image[1], -1}));
  return {reshape(taken, index.shape().vec()), Tensor()};
}
const OpDef k_max_pool2d_backward{.id = OpId::max_pool2d_backward, .name = "max_pool2d_backward",
                                  .family = Family::NN, .shape_rule = max_pool2d_backward_shape,
                                  .cpu = max_pool2d_backward_kernel,
                                  .cuda_missing = "on CUDA max_pool2d reduces im2col's columns with amax",
                                  .backward = max_pool2d_backward_backward, .saved = Saved::Inputs,
                                  .nondiff_inputs = 2};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(softmax);
FG_REGISTER(layer_norm);
FG_REGISTER(add_layer_norm);
FG_REGISTER(rms_norm);
FG_REGISTER(norm_backward);
FG_REGISTER(im2col);
FG_REGISTER(col2im);
FG_REGISTER(conv2d);
FG_REGISTER(conv2d_input_grad);
FG_REGISTER(conv2d_weight_grad);
FG_REGISTER(batch_norm);
FG_REGISTER(batch_norm_backward);
FG_REGISTER(max_pool2d);
FG_REGISTER(max_pool2d_backward);

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
Tensor conv2d_op(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding) {
  Tensors in = b.defined() ? Tensors{x, w, b} : Tensors{x, w};
  return run_op1(k_conv2d, in, conv_attrs(w.shape()[2], w.shape()[3], stride, padding));
}
Tensor conv2d_input_grad(const Tensor& dy, const Tensor& w, const Dims& image_shape, int64_t stride, int64_t padding) {
  Attrs attrs{{"kh", w.shape()[2]}, {"kw", w.shape()[3]}, {"stride", stride}, {"padding", padding},
              {"image_shape", image_shape}};
  return run_op1(k_conv2d_input_grad, {dy, w}, attrs);
}
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& dy, const Dims& weight_shape, int64_t stride,
                          int64_t padding) {
  Attrs attrs{{"kh", weight_shape[2]}, {"kw", weight_shape[3]}, {"stride", stride}, {"padding", padding},
              {"weight_shape", weight_shape}};
  return run_op1(k_conv2d_weight_grad, {x, dy}, attrs);
}

Tensors batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensors in = with_defined({x}, weight, bias);
  Tensors out = run_op(k_batch_norm, in, {{"eps", eps}, {"has_weight", weight.defined()}, {"has_bias", bias.defined()},
                                          {"relu", false}});
  return {out[0], out[1].alias(), out[2].alias()};  // alias(): the same bytes, no autograd history
}
Tensors batch_norm_backward(const Tensors& in, double eps, bool has_weight) {
  Tensors out = run_op(k_batch_norm_backward, in, {{"eps", eps}, {"has_weight", has_weight}, {"relu", false}});
  return {out[0], out[1], out[2]};
}

Tensor max_pool2d_op(const Tensor& x, int64_t k, int64_t stride) {
  return run_op(k_max_pool2d, {x}, conv_attrs(k, k, stride, 0))[0];
}
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& index, const Dims& image_shape, int64_t k, int64_t stride) {
  Attrs attrs{{"kh", k}, {"kw", k}, {"stride", stride}, {"padding", int64_t{0}}, {"image_shape", image_shape}};
  return run_op1(k_max_pool2d_backward, {grad, index}, attrs);
}

}  // namespace fg
