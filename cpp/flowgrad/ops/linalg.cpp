// matmul with NumPy semantics: 1-D operands, batched operands with broadcast batch dims; and
// linear, x @ W^T + b over any leading dims of x, as one GEMM onto the bias (PyTorch's addmm).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/base/parallel.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/linalg/gemm.h"

namespace fg {
namespace {

Specs matmul_shape(TensorList in, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  DType dt = promote(a.dtype(), b.dtype());
  FG_CHECK(dt != DType::Bool, DType, "matmul: not defined for bool tensors (got ", describe(a),
           " and ", describe(b), ")");
  int64_t k_a = a.shape()[a.ndim() - 1], k_b = b.shape()[b.ndim() - 2];
  FG_CHECK(k_a == k_b, Shape, "matmul: ", to_string(a.shape()), " @ ", to_string(b.shape()),
           ": inner dimensions ", k_a, " and ", k_b, " differ");
  Dims batch_a(std::vector<int64_t>(a.shape().begin(), a.shape().end() - 2));
  Dims batch_b(std::vector<int64_t>(b.shape().begin(), b.shape().end() - 2));
  Dims out = raw::broadcast_shapes(batch_a, batch_b, "matmul");
  out.push_back(a.shape()[a.ndim() - 2]);
  out.push_back(b.shape().back());
  return {{out, dt}};
}

// How BLAS reads one matrix of t: row-major (trans = false) or transposed, with its leading
// dimension. Returns false when neither layout fits (the caller copies).
bool blas_layout(const Tensor& t, bool* trans, int64_t* ld) {
  int n = t.ndim();
  int64_t rows = t.shape()[n - 2], cols = t.shape()[n - 1];
  int64_t sr = t.strides()[n - 2], sc = t.strides()[n - 1];
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= std::max<int64_t>(cols, 1))) {
    *trans = false;
    *ld = rows == 1 ? std::max<int64_t>(cols, 1) : sr;
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= std::max<int64_t>(rows, 1))) {
    *trans = true;
    *ld = cols == 1 ? std::max<int64_t>(rows, 1) : sc;
    return true;
  }
  return false;
}

// t itself when BLAS can read it, else a row-major copy (which it always can); sets its layout.
Tensor blas_operand(const KernelEnv& env, Tensor t, bool* trans, int64_t* ld) {
  if (blas_layout(t, trans, ld)) return t;
  t = raw::contiguous(env, t);
  blas_layout(t, trans, ld);
  return t;
}

using BatchedGemm = decltype(&gemm_batched_cuda);

// Where matrix bi of t starts (elements), for an output batch shape broadcast from t's.
int64_t batch_offset(const Tensor& t, const Dims& out_shape, int64_t bi) {
  int n = static_cast<int>(out_shape.size());
  int64_t offset = 0;
  for (int d = n - 3; d >= 0; --d) {  // unravel the batch index, broadcasting size-1 dims
    int64_t i = bi % out_shape[d];
    bi /= out_shape[d];
    int dt = d - (n - t.ndim());
    if (dt >= 0 && t.shape()[dt] != 1) offset += i * t.strides()[dt];
  }
  return offset;
}

// The stride between consecutive matrices of t when the batch is one arithmetic sequence
// (so one strided-batched call covers it), or -1. Unused in CPU-only builds.
[[maybe_unused]] int64_t uniform_batch_stride(const Tensor& t, const Dims& out_shape, int64_t batches) {
  int64_t stride = batches > 1 ? batch_offset(t, out_shape, 1) : 0;
  for (int64_t bi = 2; bi < batches; ++bi)
    if (batch_offset(t, out_shape, bi) != bi * stride) return -1;
  return stride;
}

// The products' operands (matmul, linear) in the result's dtype (Promote).
Promotion operands_promotion(TensorList in, const Specs& specs, const Attrs&) {
  return {specs[0].dtype, (1u << in.size()) - 1};
}

// Gemm multiplies one matrix; Batched (CUDA) a uniformly strided batch in one call. The operands
// have the result's dtype (Promote). cuBLAS reads float16/bfloat16 directly and accumulates in
// float32; the CPU GEMMs multiply float32 and wider, so a half call on the CPU runs as
// cast(float32) -> matmul -> cast(back) (kHalfWidenedOnCpu, Widen): the same exact products and
// float32 sums as converting inside the kernel, but as ops that autograd and plans see, and the
// float32 copies are what the kernel would have had to materialise anyway (OpenBLAS and the
// AVX-512 GEMM read no halves).
template <decltype(&gemm_cpu) Gemm, BatchedGemm Batched = nullptr>
void matmul_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& c = out[0];
  DType dt = c.dtype();
  FG_ASSERT(in[0].dtype() == dt && in[1].dtype() == dt && (Batched != nullptr || !is_half(dt)));
  bool ta, tb;
  int64_t lda, ldb;
  Tensor a = blas_operand(env, in[0], &ta, &lda);
  Tensor b = blas_operand(env, in[1], &tb, &ldb);
  int n = c.ndim();
  int64_t M = c.shape()[n - 2], N = c.shape()[n - 1], K = a.shape()[a.ndim() - 1];
  int64_t batches = raw::span(c.shape(), 0, n - 2);
  size_t item = itemsize(dt);
  auto* pa = static_cast<char*>(a.data_ptr());
  auto* pb = static_cast<char*>(b.data_ptr());
  auto* pc = static_cast<char*>(c.data_ptr());
  if constexpr (Batched != nullptr) {
    int64_t stride_a = uniform_batch_stride(a, c.shape(), batches), stride_b = uniform_batch_stride(b, c.shape(), batches);
    if (batches > 1 && stride_a >= 0 && stride_b >= 0)
      return Batched(env, dt, ta, tb, M, N, K, pa, lda, stride_a, pb, ldb, stride_b, pc, N, M * N, batches);
  }
  auto run = [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi)
      Gemm(env, dt, ta, tb, M, N, K, pa + batch_offset(a, c.shape(), bi) * item, lda,
           pb + batch_offset(b, c.shape(), bi) * item, ldb, pc + bi * M * N * item, N);
  };
  // Many small products: one BLAS thread per product, products spread over the pool.
  constexpr int64_t kSmallProduct = 128 * 128 * 128;
  if (Gemm == &gemm_cpu && batches > 1 && M * N * K <= kSmallProduct) {
    SingleThreadedBlas single;
    parallel_for(batches, 1, run);
  } else {
    run(0, batches);
  }
}

Tensors matmul_backward(const BackwardCtx& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  return {c.needs_grad[0] ? sum_to(matmul(g, transpose(b, -1, -2)), a.shape()) : Tensor(),
          c.needs_grad[1] ? sum_to(matmul(transpose(a, -1, -2), g), b.shape()) : Tensor()};
}

const OpDef k_matmul{.id = OpId::matmul, .name = "matmul", .family = Family::Linalg,
                     .flags = kHalfNative | kHalfWidenedOnCpu, .shape_rule = matmul_shape,
                     .promotion = operands_promotion,
                     .cpu = matmul_kernel<gemm_cpu>, .cuda = FG_CUDA((matmul_kernel<gemm_cuda, gemm_batched_cuda>)),
                     .backward = matmul_backward, .saved = Saved::Inputs};

// matmul_pair: inputs (a1, b1, a2, b2) -> (a1 @ b1, a2 @ b2), two independent products that the plan
// pass pair_gemms found side by side (a linear's input and weight gradients). On a pool of two or
// more threads both run at once, each one single-threaded BLAS call on its own thread: at the
// transformer's shapes a GEMM split over two threads runs at 70-85% of twice one thread's speed
// (its jobs share packed panels and wait on each other), two whole GEMMs side by side near 100%.
// That needs operands BLAS reads in place (no temporary from the shared env), else, and inside a
// parallel region or on one thread, they run one after the other; so do products whose K the
// AVX-512 GEMM splits over the threads (a long batch: each thread reads the rows it produced).
Specs matmul_pair_shape(TensorList in, const Attrs& attrs) {
  FG_CHECK(in.size() == 4, Value, "matmul_pair: expected 4 inputs (a1, b1, a2, b2), got ", in.size());
  Specs specs = matmul_shape({in[0], in[1]}, attrs);
  specs.push_back(matmul_shape({in[2], in[3]}, attrs)[0]);
  return specs;
}

// Whether BLAS reads t as it is (setting whether it reads it transposed).
bool blas_reads_in_place(const Tensor& t, DType dt, bool* trans) {
  int64_t ld;
  return t.ndim() == 2 && t.dtype() == dt && !is_half(dt) && blas_layout(t, trans, &ld);
}

void matmul_pair_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  auto product = [&](int64_t k) { matmul_kernel<gemm_cpu>(env, {in[2 * k], in[2 * k + 1]}, Tensors{out[k]}, attrs); };
  bool apart = pool_threads() > 1 && !in_parallel_region();
  bool trans[4];
  for (int k = 0; k < 4; ++k) apart = apart && blas_reads_in_place(in[k], out[k / 2].dtype(), &trans[k]);
  for (int k = 0; k < 2 && apart; ++k)  // a product whose threads split K runs faster on all of them
    apart = !gemm_cpu_splits_k(out[k].dtype(), trans[2 * k], trans[2 * k + 1], out[k].shape()[0], out[k].shape()[1],
                               in[2 * k].shape()[1]);
  if (!apart) {
    product(0);
    product(1);
    return;
  }
  SingleThreadedBlas single;
  parallel_for(2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) product(k);
  });
}

const OpDef k_matmul_pair{.id = OpId::matmul_pair, .name = "matmul_pair", .family = Family::Linalg,
                          .shape_rule = matmul_pair_shape, .cpu = matmul_pair_kernel,
                          .cuda_missing = "the plan pairs products on the CPU only (on a GPU one GEMM fills the device)",
                          .not_differentiable = "made by the plan pass pair_gemms after the backward is traced"};

// linear: inputs (x (..., in), weight (out, in)[, bias (out)]) -> (..., out). linear_<act>, made
// by the plan pass fuse_epilogues, also applies the activation to the result; with the attribute
// keep_input its outputs are (act(y), y), for a backward rule that reads y, and with
// keep_derivative as well (gelu, gelu_tanh, silu) (act(y), act'(y)): the derivative that backward
// would compute from y, computed as its functor with gradient 1 (functors.h), so that the backward
// becomes a multiply with the same bits.
Specs linear_specs(TensorList in, const char* op) {
  const Tensor &x = in[0], &w = in[1];
  FG_CHECK(w.ndim() == 2, Shape, op, ": weight must be (out_features, in_features), got ", to_string(w.shape()));
  FG_CHECK(x.ndim() >= 1 && x.shape().back() == w.shape()[1], Shape, op, ": input ", to_string(x.shape()),
           " does not end in in_features = ", w.shape()[1], " of weight ", to_string(w.shape()));
  DType dt = promote(x.dtype(), w.dtype());
  if (in.size() > 2) {
    const Tensor& b = in[2];
    FG_CHECK(b.ndim() == 1 && b.shape()[0] == w.shape()[0], Shape, op, ": bias must be (", w.shape()[0],
             ",) for weight ", to_string(w.shape()), ", got ", to_string(b.shape()));
    dt = promote(dt, b.dtype());
  }
  FG_CHECK(dt != DType::Bool, DType, op, ": not defined for bool tensors (got ", describe(x), " and ", describe(w), ")");
  std::vector<int64_t> shape = x.shape().vec();
  shape.back() = w.shape()[0];
  return {{Dims(shape), dt}};
}

Specs linear_shape(TensorList in, const Attrs&) { return linear_specs(in, "linear"); }

template <OpId Id>
Specs linear_act_shape(TensorList in, const Attrs& attrs) {
  Specs specs = linear_specs(in, op_name(Id).data());
  if (attrs.b("keep_input")) specs.push_back(specs[0]);
  return specs;
}

// x as the (rows, in) matrix of its leading dims: a view when their strides collapse into one,
// else a contiguous copy.
Tensor as_rows(const KernelEnv& env, const Tensor& x, int64_t rows) {
  int n = x.ndim();
  int64_t row_stride = x.shape().back(), next = -1;
  for (int d = n - 2; d >= 0; --d) {
    if (x.shape()[d] == 1) continue;
    if (next >= 0 && x.strides()[d] != next) return as_rows(env, raw::contiguous(env, x), rows);
    if (next < 0) row_stride = x.strides()[d];
    next = x.strides()[d] * x.shape()[d];
  }
  return x.alias(Dims{rows, x.shape().back()}, Dims{row_stride, x.strides()[n - 1]}, x.offset());
}

// Gemm overwrites, Accumulate adds onto the bias broadcast into the output first; Unary applies
// the activation Act (linear_<act>; -1 for linear) over the result, in place or from y into the
// activation output, while the product is still in cache. Where flowgrad's AVX-512 GEMM takes a
// float32 product, it adds the bias and applies the activation as it stores each tile instead.
// The backward functor of a linear_<act> that keeps the derivative (keep_derivative).
BinaryFn derivative_of(UnaryFn act) {
  switch (act) {
    case UnaryFn::Gelu: return BinaryFn::GeluGrad;
    case UnaryFn::GeluTanh: return BinaryFn::GeluTanhGrad;
    case UnaryFn::Silu: return BinaryFn::SiluGrad;
    default: fail(ErrorKind::Runtime, "internal error: linear_<act> keeps no derivative of unary function ",
                  static_cast<int>(act));
  }
}

template <decltype(&gemm_cpu) Gemm, decltype(&gemm_cpu) Accumulate, decltype(&unary_cpu) Unary,
          decltype(&binary_cpu) Binary, int Act>
void linear_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& result = out[0];
  DType dt = result.dtype();  // of every input (Promote); never half on the CPU (Widen: see matmul_kernel)
  for (const Tensor& t : in) FG_ASSERT(t.dtype() == dt);
  FG_ASSERT(Gemm != &gemm_cpu || !is_half(dt));
  const Tensor& y = out.size() > 1 ? out[1] : out[0];  // the product before the activation
  const bool derivative = Act >= 0 && out.size() > 1 && attrs.b("keep_derivative");  // y then ends as act'(y)
  int64_t N = in[1].shape()[0], K = in[1].shape()[1], M = raw::span(y.shape(), 0, y.ndim() - 1);
  const bool bias = in.size() > 2;
  const Tensor bias_values = bias ? in[2] : Tensor();
  bool fused = false;  // the bias and the activation ran in the GEMM's store
  if (K == 0 || M == 0 || N == 0) {  // nothing to multiply: the bias, or zeros
    if (bias) raw::copy_into(env, y, bias_values);
    else if (y.numel() > 0) raw::fill(env, y, 0.0);
  } else {
    const Tensor &x = in[0], &w = in[1];
    bool ta, tb;
    int64_t lda, ldb;
    Tensor a = blas_operand(env, as_rows(env, x, M), &ta, &lda);
    Tensor b = blas_operand(env, w.alias(Dims{K, N}, Dims{w.strides()[1], w.strides()[0]}, w.offset()), &tb, &ldb);  // W^T
    if constexpr (Gemm == &gemm_cpu) {
      // One pass: the bias and the activation (into the result; y keeps the product, or its
      // derivative, for keep_input) as the GEMM stores each tile.
      std::optional<UnaryFn> act;
      if constexpr (Act >= 0) act = static_cast<UnaryFn>(Act);
      const Tensor contiguous_bias = bias ? raw::contiguous(env, bias_values) : Tensor();
      fused = gemm_epilogue_cpu(env, dt, ta, tb, M, N, K, a.data_ptr(), lda, b.data_ptr(), ldb,
                                bias ? contiguous_bias.data_ptr() : nullptr, act,
                                out.size() > 1 ? result.data_ptr() : nullptr, N, y.data_ptr(), N, derivative);
    }
    if (!fused) {
      if (bias) raw::copy_into(env, y, bias_values);
      (bias ? Accumulate : Gemm)(env, dt, ta, tb, M, N, K, a.data_ptr(), lda, b.data_ptr(), ldb, y.data_ptr(), N);
    }
  }
  if constexpr (Act >= 0) {
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    if (!fused) {
      if constexpr (Unary == &unary_cpu) {
        if (derivative)  // both from one pass (y and result are the op's own, contiguous)
          return activation_and_derivative_cpu(env, static_cast<UnaryFn>(Act), dt, y.data_ptr(), result.data_ptr(),
                                               y.numel());
      }
      Unary(env, static_cast<UnaryFn>(Act), dt, raw::strided_over<2>(y.shape(), {&result, &y}), kNaN, kNaN);
      if (derivative) {  // y = Grad(1, y) in place
        Tensor one = Tensor::temporary(env, Dims{}, dt, y.device());
        raw::fill(env, one, 1.0);
        Binary(env, derivative_of(static_cast<UnaryFn>(Act)), dt, raw::strided_over<3>(y.shape(), {&y, &one, &y}));
      }
    }
  }
}

// dX = dY W, dW = dY^T X over the rows of every leading dim, db = the column sum of dY.
Tensors linear_backward(const BackwardCtx& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  int64_t N = w.shape()[0], K = w.shape()[1], M = raw::span(x.shape(), 0, x.ndim() - 1);
  Tensors grads(c.inputs.size());
  if (c.needs_grad[0]) grads[0] = matmul(g, w);
  if (c.needs_grad[1]) grads[1] = matmul(transpose(reshape(g, {M, N}), 0, 1), reshape(x, {M, K}));
  if (grads.size() > 2 && c.needs_grad[2]) {
    std::vector<int64_t> lead(g.ndim() - 1);
    for (size_t d = 0; d < lead.size(); ++d) lead[d] = static_cast<int64_t>(d);
    grads[2] = lead.empty() ? g : sum(g, Dims(lead), false);
  }
  return grads;
}

const OpDef k_linear{.id = OpId::linear, .name = "linear", .family = Family::Linalg,
                     .flags = kHalfNative | kHalfWidenedOnCpu, .shape_rule = linear_shape,
                     .promotion = operands_promotion,
                     .cpu = linear_kernel<gemm_cpu, gemm_accumulate_cpu, unary_cpu, binary_cpu, -1>,
                     .cuda = FG_CUDA((linear_kernel<gemm_cuda, gemm_accumulate_cuda, unary_cuda, binary_cuda, -1>)),
                     .backward = linear_backward, .saved = Saved::Inputs};

template <OpId Id, UnaryFn Fn>
constexpr OpDef linear_act_def() {
  constexpr int act = static_cast<int>(Fn);
  return {.id = Id, .name = op_name(Id).data(), .family = Family::Linalg, .flags = kHalfNative | kHalfWidenedOnCpu,
          .shape_rule = linear_act_shape<Id>, .promotion = operands_promotion,
          .cpu = linear_kernel<gemm_cpu, gemm_accumulate_cpu, unary_cpu, binary_cpu, act>,
          .cuda = FG_CUDA((linear_kernel<gemm_cuda, gemm_accumulate_cuda, unary_cuda, binary_cuda, act>)),
          .not_differentiable = "made by the plan pass fuse_epilogues after the backward is traced"};
}
#define FG_LINEAR_ACT(NAME, FN) const OpDef k_linear_##NAME = linear_act_def<OpId::linear_##NAME, UnaryFn::FN>();
FG_LINEAR_ACT(relu, Relu)
FG_LINEAR_ACT(gelu, Gelu)
FG_LINEAR_ACT(gelu_tanh, GeluTanh)
FG_LINEAR_ACT(silu, Silu)
FG_LINEAR_ACT(tanh, Tanh)
FG_LINEAR_ACT(sigmoid, Sigmoid)
#undef FG_LINEAR_ACT

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(matmul);
FG_REGISTER(matmul_pair);
FG_REGISTER(linear);
FG_REGISTER(linear_relu);
FG_REGISTER(linear_gelu);
FG_REGISTER(linear_gelu_tanh);
FG_REGISTER(linear_silu);
FG_REGISTER(linear_tanh);
FG_REGISTER(linear_sigmoid);

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (bias.defined()) return run_op1(k_linear, {x, weight, bias});
  return run_op1(k_linear, {x, weight});
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  FG_CHECK(a.ndim() > 0 && b.ndim() > 0, Shape, "matmul: operands must have at least one dim, got ",
           to_string(a.shape()), " and ", to_string(b.shape()), " (use mul for scalars)");
  bool vec_a = a.ndim() == 1, vec_b = b.ndim() == 1;
  if (vec_a && vec_b)
    FG_CHECK(a.shape()[0] == b.shape()[0], Shape, "matmul: ", to_string(a.shape()), " @ ",
             to_string(b.shape()), ": inner dimensions ", a.shape()[0], " and ", b.shape()[0], " differ");
  if (!vec_b && b.ndim() == 2 && a.ndim() > 2) {
    // (..., M, K) @ (K, N) is one (batch*M, K) @ (K, N) product: one BLAS call forward, and in
    // backward the weight gradient comes out of a single product instead of a batch summed.
    FG_CHECK(a.shape().back() == b.shape()[0], Shape, "matmul: ", to_string(a.shape()), " @ ",
             to_string(b.shape()), ": inner dimensions ", a.shape().back(), " and ", b.shape()[0], " differ");
    std::vector<int64_t> shape = a.shape().vec();
    shape.back() = b.shape()[1];
    int64_t rows = raw::span(a.shape(), 0, a.ndim() - 1);  // not -1: K may be 0
    return reshape(run_op1(k_matmul, {reshape(a, {rows, a.shape().back()}), b}), shape);
  }
  Tensor out = run_op1(k_matmul, {vec_a ? unsqueeze(a, 0) : a, vec_b ? unsqueeze(b, -1) : b});
  if (vec_b) out = squeeze(out, -1);
  if (vec_a) out = squeeze(out, vec_b ? -1 : -2);
  return out;
}

}  // namespace fg
