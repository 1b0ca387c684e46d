// matmul with NumPy semantics: 1-D operands, batched operands with broadcast batch dims.
#include "flowgrad/ops/kernel_args.h"
#include "flowgrad/ops/ops.h"
#include "kernels/common/parallel.h"
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
  Dims out = broadcast_shapes(batch_a, batch_b, "matmul");
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

template <decltype(&gemm_cpu) Gemm>
void matmul_kernel(TensorList in, const Tensors& out, const Attrs&) {
  const Tensor& c = out[0];
  DType dt = c.dtype();
  Tensor a = converted(in[0], dt), b = converted(in[1], dt);
  bool ta, tb;
  int64_t lda, ldb;
  if (!blas_layout(a, &ta, &lda)) {  // neither layout fits: a row-major copy always does
    a = contiguous_raw(a);
    blas_layout(a, &ta, &lda);
  }
  if (!blas_layout(b, &tb, &ldb)) {
    b = contiguous_raw(b);
    blas_layout(b, &tb, &ldb);
  }
  int n = c.ndim();
  int64_t M = c.shape()[n - 2], N = c.shape()[n - 1], K = a.shape()[a.ndim() - 1];
  int64_t batches = span(c.shape(), 0, n - 2);
  size_t item = itemsize(dt);
  auto run = [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      int64_t off_a = 0, off_b = 0, rest = bi;
      for (int d = n - 3; d >= 0; --d) {  // unravel the batch index, broadcasting size-1 dims
        int64_t i = rest % c.shape()[d];
        rest /= c.shape()[d];
        int da = d - (n - a.ndim()), db = d - (n - b.ndim());
        if (da >= 0 && a.shape()[da] != 1) off_a += i * a.strides()[da];
        if (db >= 0 && b.shape()[db] != 1) off_b += i * b.strides()[db];
      }
      Gemm(dt, ta, tb, M, N, K, static_cast<char*>(a.data_ptr()) + off_a * item, lda,
               static_cast<char*>(b.data_ptr()) + off_b * item, ldb,
               static_cast<char*>(c.data_ptr()) + bi * M * N * item, N);
    }
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

const OpDef k_matmul{.name = "matmul", .family = Family::Linalg, .shape_rule = matmul_shape,
                     .cpu = matmul_kernel<gemm_cpu>, .cuda = FG_CUDA(matmul_kernel<gemm_cuda>),
                     .backward = matmul_backward, .saved = Saved::Inputs};

}  // namespace

std::vector<const OpDef*> linalg_ops() { return {&k_matmul}; }

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
    return reshape(run_op1(k_matmul, {reshape(a, {-1, a.shape().back()}), b}), shape);
  }
  Tensor out = run_op1(k_matmul, {vec_a ? unsqueeze(a, 0) : a, vec_b ? unsqueeze(b, -1) : b});
  if (vec_b) out = squeeze(out, -1);
  if (vec_a) out = squeeze(out, vec_b ? -1 : -2);
  return out;
}

}  // namespace fg
