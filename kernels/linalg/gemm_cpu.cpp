#include "kernels/linalg/gemm.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "kernels/linalg/gemv.h"
#include "kernels/linalg/sgemm.h"

#if defined(FLOWGRAD_HAVE_BLAS)
// Fortran BLAS: every vendor (OpenBLAS, MKL, BLIS, reference) exports these.
extern "C" {
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b,
            const int* ldb, const double* beta, double* c, const int* ldc);
}
#endif

// OpenBLAS's build description; absent (null) with other BLAS libraries.
extern "C" char* openblas_get_corename() __attribute__((weak));
extern "C" char* openblas_get_config() __attribute__((weak));
#if !defined(FLOWGRAD_BLAS_LIBRARY)
#define FLOWGRAD_BLAS_LIBRARY ""
#endif

namespace fg {


const char* blas_name() {
#if defined(FLOWGRAD_HAVE_BLAS)
  return FLOWGRAD_BLAS_NAME;
#else
  return "none";
#endif
}

BlasInfo blas_info() {
  return {FLOWGRAD_BLAS_SETTING, FLOWGRAD_BLAS_LIBRARY, openblas_get_corename ? openblas_get_corename() : "",
          openblas_get_config ? openblas_get_config() : ""};
}

template <class T>
void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
                  int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc) {
  constexpr int64_t kBlockM = 64, kBlockK = 256;
  // Pack B as a plain (K, N) row-major matrix so the inner loop streams along N.
  std::vector<T> packed_b(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j)
      packed_b[k * N + j] = trans_b ? B[j * ldb + k] : B[k * ldb + j];
  auto a_at = [&](int64_t i, int64_t k) { return trans_a ? A[k * lda + i] : A[i * lda + k]; };
  int64_t blocks = (M + kBlockM - 1) / kBlockM;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t bm = b0; bm < b1; ++bm) {
      int64_t i0 = bm * kBlockM, i1 = std::min(M, i0 + kBlockM);
      for (int64_t i = i0; i < i1; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        int64_t k1 = std::min(K, k0 + kBlockK);
        for (int64_t i = i0; i < i1; ++i) {
          T* __restrict c = C + i * ldc;
          for (int64_t k = k0; k < k1; ++k) {
            const T a = a_at(i, k);
            const T* __restrict b = packed_b.data() + k * N;
            for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
          }
        }
      }
    }
  });
}

template void gemm_blocked<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                  const float*, int64_t, float*, int64_t);
template void gemm_blocked<double>(bool, bool, int64_t, int64_t, int64_t, const double*,
                                   int64_t, const double*, int64_t, double*, int64_t);

namespace {

#if defined(FLOWGRAD_HAVE_BLAS)
template <class T, class Fn>
bool try_blas(Fn gemm, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
              int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (v > INT_MAX) return false;
  // Row-major C = A B is column-major C^T = B^T A^T.
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(std::max<int64_t>(lda, 1));
  const int lb = static_cast<int>(std::max<int64_t>(ldb, 1));
  const int lc = static_cast<int>(std::max<int64_t>(ldc, 1));
  const T one = 1;
  gemm(&tb, &ta, &m, &n, &k, &one, B, &lb, A, &la, &beta, C, &lc);
  return true;
}
#endif

constexpr bool have_blas() {
#if defined(FLOWGRAD_HAVE_BLAS)
  return true;
#else
  return false;
#endif
}

// Where the AVX-512 kernel beats OpenBLAS (benchmarks/results/sgemm-2026-11-24.md): not on
// matrix-vector shapes (fewer than 4 rows or columns) nor on tiny products, whose packing costs
// more than the multiply-adds; under 32 columns it multiplies the transposed product, which pays
// from a million multiply-adds (a 512-row batch through a 10-class head: 56 us against 102). Up to
// 8 rows of a row-major A through W^T (a small batch through a linear layer: dot products, no
// packing) it wins from 2^17 multiply-adds, one row included (1x784x512: 7.8 us against 14.5).
bool sgemm_avx512_beats_blas(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  if (sgemm_avx512_dots(trans_a, trans_b, M)) return M * N * K >= (1 << 17);
  if (std::min(M, N) < 4) return false;
  if (N >= 32) return M * N * K >= (1 << 18);
  return M >= 32 && M * N * K >= (1 << 20);
}

// Whether a float32 product of this shape runs on flowgrad's AVX-512 kernel.
bool own_sgemm(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  return sgemm_in_use() == Sgemm::Avx512 && (!have_blas() || sgemm_avx512_beats_blas(M, N, K, trans_a, trans_b));
}
bool own_sgemm(DType dtype, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  return dtype == DType::Float32 && M > 0 && N > 0 && K > 0 && own_sgemm(M, N, K, trans_a, trans_b);
}

// C = A B + beta C, beta 0 (overwrite) or 1 (accumulate).
template <class T>
void gemm_typed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
                int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == T(0))
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (gemv_cpu_applies(trans_a, trans_b, M, N, K))
      return gemv_cpu<T>(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, nullptr);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (own_sgemm(M, N, K, trans_a, trans_b))
      return sgemm_avx512(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
#if defined(FLOWGRAD_HAVE_BLAS)
  if constexpr (std::is_same_v<T, float>) {
    if (try_blas(sgemm_, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc)) return;
  } else if constexpr (std::is_same_v<T, double>) {
    if (try_blas(dgemm_, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc)) return;
  }
#endif
  if (beta == T(0)) return gemm_blocked<T>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  std::vector<T> product(static_cast<size_t>(M * N));
  gemm_blocked<T>(trans_a, trans_b, M, N, K, A, lda, B, ldb, product.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += product[i * N + j];
}

}  // namespace

template void gemm_blocked<int32_t>(bool, bool, int64_t, int64_t, int64_t, const int32_t*,
                                    int64_t, const int32_t*, int64_t, int32_t*, int64_t);
template void gemm_blocked<int64_t>(bool, bool, int64_t, int64_t, int64_t, const int64_t*,
                                    int64_t, const int64_t*, int64_t, int64_t*, int64_t);

namespace {

void gemm_dispatch(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                   int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
  visit_compute_dtype(dtype, "matmul", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      FG_ASSERT(false && "matmul on bool is rejected by its shape rule");
    } else {
      gemm_typed<T>(trans_a, trans_b, M, N, K, static_cast<const T*>(A), lda,
                    static_cast<const T*>(B), ldb, static_cast<T>(beta), static_cast<T*>(C), ldc);
    }
  });
}

}  // namespace

void gemm_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc) {
  gemm_dispatch(dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, 0.0, C, ldc);
}

bool gemm_cpu_splits_k(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  return own_sgemm(dtype, M, N, K, trans_a, trans_b) && sgemm_avx512_splits_k(trans_a, trans_b, M, N, K);
}

bool gemm_epilogue_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       const void* A, int64_t lda, const void* B, int64_t ldb, const void* bias,
                       std::optional<UnaryFn> act, void* out, int64_t ldo, void* C, int64_t ldc, bool derivative) {
  if (!act && (dtype == DType::Float32 || dtype == DType::Float64) && gemv_cpu_applies(trans_a, trans_b, M, N, K)) {
    if (dtype == DType::Float32)
      gemv_cpu<float>(trans_a, trans_b, M, N, K, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb,
                      0.f, static_cast<float*>(C), ldc, static_cast<const float*>(bias));
    else
      gemv_cpu<double>(trans_a, trans_b, M, N, K, static_cast<const double*>(A), lda, static_cast<const double*>(B),
                       ldb, 0.0, static_cast<double*>(C), ldc, static_cast<const double*>(bias));
    return true;
  }
  if (!own_sgemm(dtype, M, N, K, trans_a, trans_b) || (act && !sgemm_activation_supported(*act))) return false;
  FG_ASSERT((!derivative || (act && out && sgemm_derivative_supported(*act))) && "gemm: a derivative it cannot keep");
  sgemm_avx512(trans_a, trans_b, M, N, K, static_cast<const float*>(A), lda, static_cast<const float*>(B), ldb, 0.f,
               static_cast<float*>(C), ldc,
               {static_cast<const float*>(bias), act, static_cast<float*>(out), ldo, derivative});
  return true;
}

void gemm_accumulate_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc) {
  gemm_dispatch(dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, 1.0, C, ldc);
}

}  // namespace fg
