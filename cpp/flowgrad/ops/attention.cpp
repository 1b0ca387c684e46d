// scaled_dot_product_attention: the fused flash_attention op (forward and backward kernels in
// kernels/attention/) where it applies, else the composite of matmul and softmax, which stays as
// the reference the tests compare the fused kernels against.
#include <algorithm>
#include <cmath>
#include <limits>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/attention/attention.h"

namespace fg {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

Dims batch_dims(const Tensor& t) { return Dims(std::vector<int64_t>(t.shape().begin(), t.shape().end() - 2)); }

// The errors of the public function (either path): documented in its docstring.
void check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  FG_CHECK(q.ndim() >= 2 && k.ndim() >= 2 && v.ndim() >= 2, Shape, kOp,
           ": q, k, v must be (..., L, E), got ", to_string(q.shape()), ", ", to_string(k.shape()),
           ", ", to_string(v.shape()));
  FG_CHECK(q.shape().back() == k.shape().back(), Shape, kOp, ": q ", to_string(q.shape()),
           " and k ", to_string(k.shape()), " must share the embedding dim");
  FG_CHECK(k.shape()[k.ndim() - 2] == v.shape()[v.ndim() - 2], Shape, kOp, ": k ",
           to_string(k.shape()), " and v ", to_string(v.shape()), " must share the sequence dim");
  FG_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), DType, kOp,
           ": q, k, v must share one floating dtype, got ", describe(q), ", ", describe(k), ", ", describe(v));
  FG_CHECK(q.device() == k.device() && q.device() == v.device(), Device, kOp,
           ": q, k, v must be on one device, got ", describe(q), ", ", describe(k), ", ", describe(v));
  if (!mask.defined()) return;
  Dims scores = raw::broadcast_shapes(batch_dims(q), batch_dims(k), kOp);
  scores.push_back(q.shape()[q.ndim() - 2]), scores.push_back(k.shape()[k.ndim() - 2]);
  raw::broadcast_shapes(mask.shape(), scores, kOp);  // ShapeError naming both shapes
  FG_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()), DType, kOp,
           ": attn_mask must be bool (true = attend) or floating (added to the scores), got ", describe(mask));
  FG_CHECK(mask.device() == q.device(), Device, kOp, ": attn_mask ", describe(mask),
           " is not on q's device ", q.device().str());
}

// Why the fused kernels cannot take these arguments (nullptr when they can).
const char* fused_problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  Dims batch = batch_dims(q);
  if (batch_dims(k) != batch || batch_dims(v) != batch) return "q, k, v must have the same batch dims";
  int64_t L = q.shape()[q.ndim() - 2], S = k.shape()[k.ndim() - 2];
  if (S == 0 || q.shape().back() == 0 || v.shape().back() == 0) return "empty key sequence or head dim";
  if (mask.defined()) {
    if (batch.size() > kAttentionMaxBatchDims) return "too many batch dims for a mask";
    Dims full = batch;
    full.push_back(L), full.push_back(S);
    if (mask.ndim() > full.size()) return "attn_mask has more dims than the scores";
    for (int d = 0; d < mask.ndim(); ++d) {
      int64_t m = mask.shape()[d], f = full[full.size() - mask.ndim() + d];
      if (m != f && m != 1) return "attn_mask does not broadcast to the scores (..., L, S)";
    }
  }
  if (q.device().is_cuda()) {
    if (q.dtype() == DType::Float64) return "float64 on cuda";
    if (q.shape().back() > kAttentionCudaMaxHeadDim || v.shape().back() > kAttentionCudaMaxHeadDim)
      return "head dim above 128 on cuda";
#if defined(FLOWGRAD_HAVE_CUDA)
    int64_t head_dim = std::max(q.shape().back(), v.shape().back());
    if (const char* problem = attention_cuda_device_problem(q.dtype(), head_dim, q.device().index)) return problem;
#endif
  }
  return nullptr;
}

DType accumulation_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

// ---- flash_attention: (q, k, v[, mask]) -> (out, stats); attrs scale, causal ----
Specs flash_attention_shape(TensorList in, const Attrs&) {
  const Tensor& q = in[0];
  Tensor mask = in.size() > 3 ? in[3] : Tensor();
  check_attention_args(q, in[1], in[2], mask);
  const char* problem = fused_problem(q, in[1], in[2], mask);
  FG_CHECK(!problem, Shape, "flash_attention: ", problem, " (q ", to_string(q.shape()), ", k ",
           to_string(in[1].shape()), ", v ", to_string(in[2].shape()), ")");
  Dims out = batch_dims(q), stats = batch_dims(q);
  out.push_back(q.shape()[q.ndim() - 2]), out.push_back(in[2].shape().back());
  stats.push_back(q.shape()[q.ndim() - 2]), stats.push_back(2);  // each row's max and log-sum (attention.h)
  return {{out, q.dtype()}, {stats, accumulation_dtype(q.dtype())}};
}

// Contiguous operands in the dtype the device computes in (the CPU widens half types) and the
// mask's broadcast strides over (batch..., L, S).
struct AttentionCall {
  DType dtype;
  AttentionShape shape;
  AttentionMask mask;
  Tensors operands;  // q, k, v, then the tensors the backward reads; kept alive here
  Tensor mask_data;
};

AttentionCall attention_call(TensorList in, size_t mask_at, const Attrs& attrs) {
  const Tensor& q = in[0];
  AttentionCall c;
  c.dtype = q.device().is_cpu() ? accumulation_dtype(q.dtype()) : q.dtype();
  for (size_t i = 0; i < mask_at; ++i) c.operands.push_back(raw::contiguous(raw::converted(in[i], i < 3 ? c.dtype : in[i].dtype())));
  int64_t L = q.shape()[q.ndim() - 2], S = in[1].shape()[in[1].ndim() - 2];
  c.shape = {batch_dims(q).numel(), L, S, q.shape().back(), in[2].shape().back(), attrs.f("scale"),
             attrs.b("causal")};
  if (in.size() <= mask_at) return c;
  const Tensor& m = in[mask_at];
  bool is_bool = m.dtype() == DType::Bool;
  c.mask_data = raw::contiguous(is_bool ? m : raw::converted(m, accumulation_dtype(q.dtype())));
  c.mask.kind = is_bool ? MaskKind::Bool : MaskKind::Additive;
  c.mask.data = c.mask_data.data_ptr();
  int full = q.ndim(), lead = full - m.ndim();
  auto stride = [&](int d, int64_t size) {  // of full dim d, 0 where the mask broadcasts
    int md = d - lead;
    return md < 0 || (m.shape()[md] == 1 && size != 1) ? int64_t{0} : c.mask_data.strides()[md];
  };
  c.mask.batch_ndim = full - 2;
  for (int d = 0; d < full - 2; ++d) {
    c.mask.batch_shape[d] = q.shape()[d];
    c.mask.batch_stride[d] = stride(d, q.shape()[d]);
  }
  c.mask.row_stride = stride(full - 2, L);
  c.mask.col_stride = stride(full - 1, S);
  return c;
}

// out[i] itself when it has the compute dtype, else a temporary that finish() copies back.
Tensor compute_target(const Tensor& out, DType dtype) {
  return out.dtype() == dtype ? out : Tensor::empty(out.shape(), dtype, out.device());
}
void finish(const Tensor& out, const Tensor& target) {
  if (target.data_ptr() != out.data_ptr()) raw::copy_into(out, target);
}

template <decltype(&attention_forward_cpu) Run>
void flash_attention_kernel(TensorList in, const Tensors& out, const Attrs& attrs) {
  AttentionCall c = attention_call(in, 3, attrs);
  Tensor o = compute_target(out[0], c.dtype);
  const Tensors& x = c.operands;
  Run(c.dtype, c.shape, c.mask, x[0].data_ptr(), x[1].data_ptr(), x[2].data_ptr(), o.data_ptr(),
      out[1].data_ptr());
  finish(out[0], o);
}

// ---- flash_attention_backward: (dout, q, k, v, out, stats[, mask]) -> (dq, dk, dv) ----
Specs flash_attention_backward_shape(TensorList in, const Attrs&) {
  for (int i = 1; i <= 3; ++i) FG_CHECK(in[i].dtype() == in[1].dtype(), DType, "flash_attention_backward: dtypes differ");
  return {{in[1].shape(), in[1].dtype()}, {in[2].shape(), in[2].dtype()}, {in[3].shape(), in[3].dtype()}};
}

template <decltype(&attention_backward_cpu) Run>
void flash_attention_backward_kernel(TensorList in, const Tensors& out, const Attrs& attrs) {
  // attention_call reads q, k, v at positions 0..2: shift dout to the end of the operand list
  Tensors order{in[1], in[2], in[3], in[4], in[0], in[5]};
  if (in.size() > 6) order.push_back(in[6]);
  AttentionCall c = attention_call(order, 6, attrs);
  const Tensors& x = c.operands;  // q, k, v, out, dout, stats
  Tensor o = raw::contiguous(raw::converted(x[3], c.dtype)), g = raw::contiguous(raw::converted(x[4], c.dtype));
  Tensor dq = compute_target(out[0], c.dtype), dk = compute_target(out[1], c.dtype),
         dv = compute_target(out[2], c.dtype);
  Tensor workspace;  // the CUDA kernels sum dQ over key blocks in float32
  if (!o.device().is_cpu()) workspace = Tensor::empty({c.shape.bh * c.shape.L * (c.shape.E + 1)}, DType::Float32, o.device());
  Run(c.dtype, c.shape, c.mask, x[0].data_ptr(), x[1].data_ptr(), x[2].data_ptr(), o.data_ptr(),
      g.data_ptr(), x[5].data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
      workspace.defined() ? static_cast<float*>(workspace.data_ptr()) : nullptr);
  finish(out[0], dq), finish(out[1], dk), finish(out[2], dv);
}

const OpDef k_flash_attention_backward{
    .id = OpId::flash_attention_backward, .name = "flash_attention_backward", .family = Family::NN,
    .flags = kHalfNative,
    .shape_rule = flash_attention_backward_shape,
    .cpu = flash_attention_backward_kernel<attention_backward_cpu>,
    .cuda = FG_CUDA(flash_attention_backward_kernel<attention_backward_cuda>),
    .not_differentiable = "first-order gradients only; second order differentiates the composite rule"};

Tensor attention_probs(const Tensor& q, const Tensor& k, const Tensor& mask, bool causal, double scale) {
  Tensor scores = matmul(q, transpose(k, -1, -2));  // (..., L, S); scaled inside the softmax
  if (mask.defined()) {
    scores = scores * scale;
    scale = 1.0;
    if (mask.dtype() == DType::Bool)  // true marks the positions that take part
      scores = masked_fill(scores, eq(mask, scalar_like(mask, 0)), -std::numeric_limits<double>::infinity());
    else
      scores = scores + mask;
  }
  return scaled_softmax(scores, scale, causal);
}

// With create_graph the gradients are built from public ops (differentiable again); otherwise
// one fused kernel recomputes the probabilities block by block.
Tensors flash_attention_backward(const BackwardCtx& c) {
  const Tensors& in = c.inputs;
  Tensor mask = in.size() > 3 ? in[3] : Tensor();
  Tensors grads;
  double scale = c.attrs.f("scale");
  if (c.create_graph) {
    Tensor p = attention_probs(in[0], in[1], mask, c.attrs.b("causal"), scale), g = c.grads[0];
    Tensor ds = matmul(g, transpose(in[2], -1, -2));
    ds = p * (ds - sum(ds * p, Dims{-1}, true));
    grads = {matmul(ds, in[1]) * scale, matmul(transpose(ds, -1, -2), in[0]) * scale,
             matmul(transpose(p, -1, -2), g)};
  } else {
    Tensors args{c.grads[0], in[0], in[1], in[2], c.outputs[0], c.outputs[1]};
    if (mask.defined()) args.push_back(mask);
    grads = run_op(k_flash_attention_backward, args, c.attrs);
  }
  for (size_t i = 0; i < 3; ++i)
    if (!c.needs_grad[i]) grads[i] = Tensor();
  if (mask.defined()) grads.push_back(Tensor());
  return grads;
}

const OpDef k_flash_attention{
    .id = OpId::flash_attention, .name = "flash_attention", .family = Family::NN, .flags = kHalfNative,
    .shape_rule = flash_attention_shape, .cpu = flash_attention_kernel<attention_forward_cpu>,
    .cuda = FG_CUDA(flash_attention_kernel<attention_forward_cuda>), .backward = flash_attention_backward,
    .saved = Saved::InputsAndOutputs, .nondiff_inputs = 1u << 3};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(flash_attention);
FG_REGISTER(flash_attention_backward);

Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& attn_mask, bool is_causal) {
  check_attention_args(q, k, v, attn_mask);
  double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().back()));
  return matmul(attention_probs(q, k, attn_mask, is_causal, scale), v);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal) {
  check_attention_args(q, k, v, attn_mask);
  if (fused_problem(q, k, v, attn_mask))
    return scaled_dot_product_attention_composite(q, k, v, attn_mask, is_causal);
  Tensors in{q, k, v};
  if (attn_mask.defined()) in.push_back(attn_mask);
  double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().back()));
  return run_op1(k_flash_attention, in, {{"scale", scale}, {"causal", is_causal}});
}

}  // namespace fg
