// matmul with NumPy semantics: 1-D operands, batched operands with broadcast batch dims.
#include <algorithm>
#include <cstdint>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/base/parallel.h"
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

// Gemm multiplies one matrix; Batched (CUDA) a uniformly strided batch in one call. The CPU
// multiplies float16/bfloat16 as float32 copies (exact products, float32 sums); cuBLAS reads
// them directly and accumulates in float32.
template <decltype(&gemm_cpu) Gemm, BatchedGemm Batched = nullptr>
void matmul_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  const Tensor& c = out[0];
  DType dt = c.dtype();
  if constexpr (Batched == nullptr) {
    if (is_half(dt)) {
      Tensor wide = Tensor::empty(c.shape(), DType::Float32, c.device());
      matmul_kernel<Gemm>(env, {raw::converted(in[0], DType::Float32), raw::converted(in[1], DType::Float32)}, Tensors{wide}, attrs);
      raw::copy_into(c, wide);
      return;
    }
  }
  Tensor a = raw::converted(in[0], dt), b = raw::converted(in[1], dt);
  bool ta, tb;
  int64_t lda, ldb;
  if (!blas_layout(a, &ta, &lda)) {  // neither layout fits: a row-major copy always does
    a = raw::contiguous(a);
    blas_layout(a, &ta, &lda);
  }
  if (!blas_layout(b, &tb, &ldb)) {
    b = raw::contiguous(b);
    blas_layout(b, &tb, &ldb);
  }
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
                     .flags = kHalfNative, .shape_rule = matmul_shape,
                     .cpu = matmul_kernel<gemm_cpu>, .cuda = FG_CUDA((matmul_kernel<gemm_cuda, gemm_batched_cuda>)),
                     .backward = matmul_backward, .saved = Saved::Inputs};

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(matmul);

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
