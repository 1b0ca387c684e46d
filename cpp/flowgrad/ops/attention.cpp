// scaled_dot_product_attention: the fused flash_attention op (forward and backward kernels in
// kernels/attention/) where it applies, else the composite of matmul and softmax, which stays as
// the reference the tests compare the fused kernels against.
#include <algorithm>
#include <cmath>
#include <limits>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/decode_attention.h"

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

// Promote: an additive (floating) mask at input `MaskAt` in the scores' dtype, the accumulation
// dtype of q (input `QAt`); a bool mask as it is. The backward ops also take the `Operands` (bits:
// dout and out) in q's dtype; for a half q, whose scores are float32, those first (the call with
// them cast comes back here for the mask).
template <size_t QAt, size_t MaskAt, uint32_t Operands = 0>
Promotion attention_promotion(TensorList in, const Specs&, const Attrs&) {
  const DType q = in[QAt].dtype(), scores = accumulation_dtype(q);
  const uint32_t mask = in.size() > MaskAt && in[MaskAt].dtype() != DType::Bool ? 1u << MaskAt : 0u;
  if constexpr (Operands != 0) {
    if (scores == q) return {q, Operands | mask};
    if (promotes({q, Operands}, in)) return {q, Operands};
  }
  return {scores, mask};
}

// ---- flash_attention: (q, k, v[, mask]) -> (out, stats); attrs scale, causal ----
// seq_major: the op's tensors of shape (..., H, L, E) are stored (..., L, H, E), as the head permute
// `x.view(B, T, H, E).transpose(1, 2)` of a (B, T, H * E) activation: the op computes through
// strided views and the public functions hand out transposed views, so neither the inputs nor the
// output nor the gradients are copied to or from the head-major order.
Dims stored_shape(Dims shape, const Attrs& attrs) {
  if (attrs.b("seq_major")) std::swap(shape[shape.size() - 2], shape[shape.size() - 3]);
  return shape;
}
Tensor heads_major(const Tensor& t, const Attrs& attrs) {  // (..., L, H, E) storage as (..., H, L, E)
  return attrs.b("seq_major") ? transpose(t, -2, -3) : t;
}

Specs flash_attention_shape(TensorList in, const Attrs& attrs) {
  const Tensor& q = in[0];
  Tensor mask = in.size() > 3 ? in[3] : Tensor();
  check_attention_args(q, in[1], in[2], mask);
  const char* problem = fused_problem(q, in[1], in[2], mask);
  FG_CHECK(!problem, Shape, "flash_attention: ", problem, " (q ", to_string(q.shape()), ", k ",
           to_string(in[1].shape()), ", v ", to_string(in[2].shape()), ")");
  Dims out = batch_dims(q), stats = batch_dims(q);
  out.push_back(q.shape()[q.ndim() - 2]), out.push_back(in[2].shape().back());
  stats.push_back(q.shape()[q.ndim() - 2]), stats.push_back(2);  // each row's max and log-sum (attention.h)
  return {{stored_shape(out, attrs), q.dtype()}, {stats, accumulation_dtype(q.dtype())}};
}

AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& attrs) {
  return {batch_dims(q).numel(), q.shape()[q.ndim() - 2], k.shape()[k.ndim() - 2], q.shape().back(),
          v.shape().back(), attrs.f("scale"), attrs.b("causal")};
}

// The mask (when defined: bool, or additive in q's accumulation dtype, Promote) with its broadcast
// strides over (batch..., L, S); `data` keeps a contiguous copy alive.
struct MaskArg {
  AttentionMask mask;
  Tensor data;
};
MaskArg mask_arg(const KernelEnv& env, const Tensor& q, const Tensor& m, int64_t S) {
  MaskArg a;
  if (!m.defined()) return a;
  bool is_bool = m.dtype() == DType::Bool;
  FG_ASSERT(is_bool || m.dtype() == accumulation_dtype(q.dtype()));
  a.data = raw::contiguous(env, m);
  a.mask.kind = is_bool ? MaskKind::Bool : MaskKind::Additive;
  a.mask.data = a.data.data_ptr();
  int full = q.ndim(), lead = full - m.ndim();
  auto stride = [&](int d, int64_t size) {  // of full dim d, 0 where the mask broadcasts
    int md = d - lead;
    return md < 0 || (m.shape()[md] == 1 && size != 1) ? int64_t{0} : a.data.strides()[md];
  };
  a.mask.batch_ndim = full - 2;
  for (int d = 0; d < full - 2; ++d) {
    a.mask.batch_shape[d] = q.shape()[d];
    a.mask.batch_stride[d] = stride(d, q.shape()[d]);
  }
  a.mask.row_stride = stride(full - 2, q.shape()[full - 2]);
  a.mask.col_stride = stride(full - 1, S);
  return a;
}

// ---- CPU: the kernels read and write strided views (attention.h, AttentionOperands) ----
// They compute in float32 or float64: a half call on the CPU is widened into ops before
// (kHalfWidenedOnCpu), so every operand and output has the compute dtype.
struct CpuCall {
  DType dtype;
  AttentionShape shape;
  MaskArg mask;
  AttentionOperands x;
  const KernelEnv* env = nullptr;  // the call's: contiguous copies come from its scratch
  Tensors keep;   // contiguous copies, alive for the call

  // t (..., rows, cols) as the kernels see it: t's own memory when it has unit column stride and
  // rows at least a row apart (BLAS's leading dimension), else a copy.
  AttentionOperand operand(const Tensor& t) {
    FG_ASSERT(t.dtype() == dtype);
    Tensor m = t;
    int n = m.ndim();
    int64_t rows = m.shape()[n - 2], cols = m.shape()[n - 1];
    bool unit_cols = cols <= 1 || m.strides()[n - 1] == 1, apart = rows <= 1 || m.strides()[n - 2] >= cols;
    if (!unit_cols || !apart) m = raw::contiguous(*env, m);  // never an output: those are laid out to fit
    keep.push_back(m);
    AttentionOperand o;
    o.data = m.data_ptr();
    o.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : m.strides()[n - 2];
    for (int d = 0; d < x.batch_ndim; ++d) o.batch_stride[d] = m.strides()[d];
    return o;
  }
};

CpuCall cpu_call(const KernelEnv& env, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const Attrs& attrs) {
  CpuCall c;
  c.env = &env;
  c.dtype = accumulation_dtype(q.dtype());
  c.shape = attention_shape(q, k, v, attrs);
  c.mask = mask_arg(env, q, mask, c.shape.S);
  static_assert(Dims::kMaxRank - 2 <= kAttentionMaxBatchDims, "every batch dim has a stride slot");
  c.x.batch_ndim = q.ndim() - 2;
  for (int d = 0; d < c.x.batch_ndim; ++d) c.x.batch_shape[d] = q.shape()[d];
  c.x.q = c.operand(q), c.x.k = c.operand(k), c.x.v = c.operand(v);
  return c;
}

// The stored (..., L, H, E) tensor of a seq_major op as its (..., H, L, E) view, no autograd.
Tensor heads_major_raw(const Tensor& t, const Attrs& attrs) {
  if (!attrs.b("seq_major")) return t;
  Dims shape = t.shape(), strides = t.strides();
  int n = t.ndim();
  std::swap(shape[n - 2], shape[n - 3]), std::swap(strides[n - 2], strides[n - 3]);
  return t.alias(shape, strides, t.offset());
}

// out[0] (stored as attrs say) and the stats out[1] of q, k, v (raw views).
void forward_cpu(const KernelEnv& env, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensors& out,
                 const Attrs& attrs) {
  CpuCall c = cpu_call(env, q, k, v, mask, attrs);
  c.x.out = c.operand(heads_major_raw(out[0], attrs));
  attention_forward_cpu(env, c.dtype, c.shape, c.mask.mask, c.x, out[1].data_ptr());  // stats: this op's own
}
void flash_attention_cpu(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  forward_cpu(env, in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(), out, attrs);
}

// ---- flash_attention_backward: (dout, q, k, v, out, stats[, mask]) -> (dq, dk, dv) ----
Specs flash_attention_backward_shape(TensorList in, const Attrs& attrs) {
  for (int i = 1; i <= 3; ++i) FG_CHECK(in[i].dtype() == in[1].dtype(), DType, "flash_attention_backward: dtypes differ");
  return {{stored_shape(in[1].shape(), attrs), in[1].dtype()}, {stored_shape(in[2].shape(), attrs), in[2].dtype()},
          {stored_shape(in[3].shape(), attrs), in[3].dtype()}};
}

// dq, dk, dv (raw views of the op's outputs) of q, k, v from dout, out (stored as attrs say), stats.
void backward_cpu(const KernelEnv& env, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& stats, const Tensor& mask, const Tensors& grads, const Attrs& attrs) {
  CpuCall c = cpu_call(env, q, k, v, mask, attrs);
  c.x.dout = c.operand(heads_major_raw(dout, attrs));
  c.x.out = c.operand(heads_major_raw(out, attrs));
  c.x.dq = c.operand(grads[0]), c.x.dk = c.operand(grads[1]), c.x.dv = c.operand(grads[2]);
  attention_backward_cpu(env, c.dtype, c.shape, c.mask.mask, c.x, raw::contiguous(env, stats).data_ptr());
}

void flash_attention_backward_cpu(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  backward_cpu(env, in[0], in[1], in[2], in[3], in[4], in[5], in.size() > 6 ? in[6] : Tensor(),
               {heads_major_raw(out[0], attrs), heads_major_raw(out[1], attrs), heads_major_raw(out[2], attrs)}, attrs);
}

// ---- flash_attention_packed: (qkv[, mask]) -> (out, stats); attrs scale, causal, heads ----
// qkv (..., T, 3 * H * D) holds q, k, v side by side, as MultiheadAttention's one projection:
// the kernels read the three head views in place, and the backward writes the three gradients
// into one (..., T, 3 * H * D) buffer (no slice_backward, no adds). Always seq_major; CPU only.

// Part `part` (0 q, 1 k, 2 v) of a packed tensor as (..., H, T, D), no autograd.
Tensor packed_part(const Tensor& qkv, int part, int64_t heads) {
  int n = qkv.ndim();
  int64_t width = qkv.shape()[n - 1] / 3, last = qkv.strides()[n - 1];
  Dims shape(std::vector<int64_t>(qkv.shape().begin(), qkv.shape().end() - 2));
  Dims strides(std::vector<int64_t>(qkv.strides().begin(), qkv.strides().end() - 2));
  shape.push_back(heads), shape.push_back(qkv.shape()[n - 2]), shape.push_back(width / heads);
  strides.push_back(width / heads * last), strides.push_back(qkv.strides()[n - 2]), strides.push_back(last);
  return qkv.alias(shape, strides, qkv.offset() + part * width * last);
}

Specs flash_attention_packed_shape(TensorList in, const Attrs& attrs) {
  int64_t heads = attrs.i("heads");
  Tensors views{packed_part(in[0], 0, heads), packed_part(in[0], 1, heads), packed_part(in[0], 2, heads)};
  if (in.size() > 1) views.push_back(in[1]);
  return flash_attention_shape(views, attrs);
}
void flash_attention_packed_cpu(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  int64_t heads = attrs.i("heads");
  forward_cpu(env, packed_part(in[0], 0, heads), packed_part(in[0], 1, heads), packed_part(in[0], 2, heads),
              in.size() > 1 ? in[1] : Tensor(), out, attrs);
}

// ---- flash_attention_packed_backward: (dout, qkv, out, stats[, mask]) -> dqkv ----
Specs flash_attention_packed_backward_shape(TensorList in, const Attrs&) { return {{in[1].shape(), in[1].dtype()}}; }
void flash_attention_packed_backward_cpu(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  int64_t heads = attrs.i("heads");
  const Tensor& dqkv = out[0];
  auto part = [&](const Tensor& t, int i) { return packed_part(t, i, heads); };
  backward_cpu(env, in[0], part(in[1], 0), part(in[1], 1), part(in[1], 2), in[2], in[3], in.size() > 4 ? in[4] : Tensor(),
               {part(dqkv, 0), part(dqkv, 1), part(dqkv, 2)}, attrs);
}

#if defined(FLOWGRAD_HAVE_CUDA)
// ---- CUDA: contiguous operands (of q's dtype, Promote) ----
Tensors contiguous_operands(const KernelEnv& env, TensorList in, size_t count, DType dtype) {
  Tensors x;
  for (size_t i = 0; i < count; ++i) {
    FG_ASSERT(in[i].dtype() == dtype);  // Promote
    x.push_back(raw::contiguous(env, in[i]));
  }
  return x;
}

void flash_attention_cuda(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  FG_ASSERT(!attrs.b("seq_major") && "seq_major is a CPU layout");
  const Tensor& q = in[0];
  MaskArg mask = mask_arg(env, q, in.size() > 3 ? in[3] : Tensor(), in[1].shape()[in[1].ndim() - 2]);
  Tensors x = contiguous_operands(env, in, 3, q.dtype());
  AttentionShape shape = attention_shape(q, in[1], in[2], attrs);
  if (shape.L == 1 && q.dtype() == DType::Float32) {  // a decode step: the keys split over blocks
    Tensor partials = Tensor::temporary(env, {shape.bh * attention_decode_splits(shape.S) * (2 + shape.Ev)},
                                        DType::Float32, q.device());
    return attention_decode_cuda(env, shape, mask.mask, static_cast<const float*>(x[0].data_ptr()),
                                 static_cast<const float*>(x[1].data_ptr()), static_cast<const float*>(x[2].data_ptr()),
                                 static_cast<float*>(out[0].data_ptr()), static_cast<float*>(out[1].data_ptr()),
                                 static_cast<float*>(partials.data_ptr()));
  }
  attention_forward_cuda(env, q.dtype(), shape, mask.mask, x[0].data_ptr(), x[1].data_ptr(), x[2].data_ptr(),
                         out[0].data_ptr(), out[1].data_ptr());
}

void flash_attention_backward_cuda(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  FG_ASSERT(!attrs.b("seq_major") && "seq_major is a CPU layout");
  const Tensor& q = in[1];
  MaskArg mask = mask_arg(env, q, in.size() > 6 ? in[6] : Tensor(), in[2].shape()[in[2].ndim() - 2]);
  Tensors x = contiguous_operands(env, in, 5, q.dtype());  // dout, q, k, v, out
  AttentionShape shape = attention_shape(q, in[2], in[3], attrs);
  // the kernels sum dQ over key blocks in float32
  Tensor workspace = Tensor::temporary(env, {shape.bh * shape.L * (shape.E + 1)}, DType::Float32, q.device());
  attention_backward_cuda(env, q.dtype(), shape, mask.mask, x[1].data_ptr(), x[2].data_ptr(), x[3].data_ptr(),
                          x[4].data_ptr(), x[0].data_ptr(), raw::contiguous(env, in[5]).data_ptr(), out[0].data_ptr(),
                          out[1].data_ptr(), out[2].data_ptr(), static_cast<float*>(workspace.data_ptr()));
}
#endif

const OpDef k_flash_attention_backward{
    .id = OpId::flash_attention_backward, .name = "flash_attention_backward", .family = Family::NN,
    .flags = kHalfNative | kHalfWidenedOnCpu,
    .shape_rule = flash_attention_backward_shape, .promotion = attention_promotion<1, 6, 0b10001u>,
    .cpu = flash_attention_backward_cpu, .cuda = FG_CUDA(flash_attention_backward_cuda),
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

// dq, dk, dv of the composite from public ops (differentiable again) for output gradient g.
Tensors composite_grads(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& g,
                        const Attrs& attrs) {
  double scale = attrs.f("scale");
  Tensor p = attention_probs(q, k, mask, attrs.b("causal"), scale);
  Tensor ds = matmul(g, transpose(v, -1, -2));
  ds = p * (ds - sum(ds * p, Dims{-1}, true));
  return {matmul(ds, k) * scale, matmul(transpose(ds, -1, -2), q) * scale, matmul(transpose(p, -1, -2), g)};
}

// With create_graph the gradients are built from public ops (differentiable again); otherwise
// one fused kernel recomputes the probabilities block by block.
Tensors flash_attention_backward(const BackwardCtx& c) {
  const Tensors& in = c.inputs;
  Tensor mask = in.size() > 3 ? in[3] : Tensor();
  Tensors grads;
  if (c.create_graph) {
    grads = composite_grads(in[0], in[1], in[2], mask, heads_major(c.grads[0], c.attrs), c.attrs);
  } else {
    Tensors args{c.grads[0], in[0], in[1], in[2], c.outputs[0], c.outputs[1]};
    if (mask.defined()) args.push_back(mask);
    grads = run_op(k_flash_attention_backward, args, c.attrs);
    for (Tensor& g : grads) g = heads_major(g, c.attrs);
  }
  for (size_t i = 0; i < 3; ++i)
    if (!c.needs_grad[i]) grads[i] = Tensor();
  if (mask.defined()) grads.push_back(Tensor());
  return grads;
}

const OpDef k_flash_attention{
    .id = OpId::flash_attention, .name = "flash_attention", .family = Family::NN,
    .flags = kHalfNative | kHalfWidenedOnCpu, .shape_rule = flash_attention_shape,
    .promotion = attention_promotion<0, 3>, .cpu = flash_attention_cpu,
    .cuda = FG_CUDA(flash_attention_cuda), .backward = flash_attention_backward,
    .saved = Saved::InputsAndOutputs, .nondiff_inputs = 1u << 3};

// The three (..., H, T, D) head views of a packed (..., T, 3 * H * D) tensor, as public views.
Tensors packed_heads(const Tensor& qkv, int64_t heads) {
  Tensors parts = chunk(qkv, 3, -1);
  for (Tensor& t : parts) {
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end() - 1);
    shape.push_back(heads), shape.push_back(t.shape().back() / heads);
    t = transpose(reshape(t, shape), -2, -3);
  }
  return parts;
}

const OpDef k_flash_attention_packed_backward{
    .id = OpId::flash_attention_packed_backward, .name = "flash_attention_packed_backward",
    .family = Family::NN, .shape_rule = flash_attention_packed_backward_shape,
    .promotion = attention_promotion<1, 4, 0b101u>,
    .cpu = flash_attention_packed_backward_cpu,
    .cuda_missing = "a CPU layout: on cuda scaled_dot_product_attention_packed runs flash_attention",
    .not_differentiable = "first-order gradients only; second order differentiates the composite rule"};

Tensors flash_attention_packed_backward(const BackwardCtx& c) {
  const Tensors& in = c.inputs;
  Tensor mask = in.size() > 1 ? in[1] : Tensor(), dqkv;
  if (c.create_graph) {
    Tensors h = packed_heads(in[0], c.attrs.i("heads"));
    Tensors grads = composite_grads(h[0], h[1], h[2], mask, heads_major(c.grads[0], c.attrs), c.attrs);
    for (Tensor& g : grads) g = flatten(transpose(g, -2, -3), -2, -1);  // (..., T, H * D)
    dqkv = cat(grads, -1);
  } else {
    Tensors args{c.grads[0], in[0], c.outputs[0], c.outputs[1]};
    if (mask.defined()) args.push_back(mask);
    dqkv = run_op1(k_flash_attention_packed_backward, args, c.attrs);
  }
  return mask.defined() ? Tensors{dqkv, Tensor()} : Tensors{dqkv};
}

const OpDef k_flash_attention_packed{
    .id = OpId::flash_attention_packed, .name = "flash_attention_packed", .family = Family::NN,
    .shape_rule = flash_attention_packed_shape, .promotion = attention_promotion<0, 1>, .cpu = flash_attention_packed_cpu,
    .cuda_missing = "a CPU layout: on cuda scaled_dot_product_attention_packed runs flash_attention",
    .backward = flash_attention_packed_backward, .saved = Saved::InputsAndOutputs, .nondiff_inputs = 1u << 1};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(flash_attention);
FG_REGISTER(flash_attention_backward);
FG_REGISTER(flash_attention_packed);
FG_REGISTER(flash_attention_packed_backward);


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
  auto head_permuted = [](const Tensor& t) {
    return t.ndim() >= 3 && t.strides()[t.ndim() - 3] < t.strides()[t.ndim() - 2];
  };
  bool seq_major = q.device().is_cpu() && head_permuted(q) && head_permuted(k) && head_permuted(v);
  Attrs attrs{{"scale", scale}, {"causal", is_causal}, {"seq_major", seq_major}};
  return heads_major(run_op1(k_flash_attention, in, attrs), attrs);
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t heads, const Tensor& attn_mask, bool is_causal) {
  FG_CHECK(qkv.ndim() >= 2 && heads > 0 && qkv.shape().back() % (3 * heads) == 0, Shape,
           "scaled_dot_product_attention_packed: qkv ", to_string(qkv.shape()),
           " must be (..., T, 3 * heads * D) with heads = ", heads);
  Tensor q = packed_part(qkv, 0, heads), k = packed_part(qkv, 1, heads), v = packed_part(qkv, 2, heads);
  check_attention_args(q, k, v, attn_mask);
  bool packed = qkv.device().is_cpu() && !fused_problem(q, k, v, attn_mask);
  if (!packed) {
    Tensors h = packed_heads(qkv, heads);
    return scaled_dot_product_attention(h[0], h[1], h[2], attn_mask, is_causal);
  }
  Tensors in{qkv};
  if (attn_mask.defined()) in.push_back(attn_mask);
  double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().back()));
  Attrs attrs{{"scale", scale}, {"causal", is_causal}, {"heads", heads}, {"seq_major", true}};
  return heads_major(run_op1(k_flash_attention_packed, in, attrs), attrs);
}

}  // namespace fg
