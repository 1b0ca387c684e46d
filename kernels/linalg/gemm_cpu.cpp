#include "kernels/linalg/gemm.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "flowgrad/base/parallel.h"

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
// One multiply-add count per part below which splitting a product costs more than it saves (a
// pool hand-over is a few microseconds; 2^19 multiply-adds take about 5 at this BLAS's speed).
constexpr double kGemmWorkPerPart = double(1 << 19);

// How many parts C = A B is computed in, each a single-threaded BLAS call on one of the pool's
// threads (BlasThreads::Pool); 1 with BLAS threading its own calls, inside a region, or when small.
int gemm_parts(int64_t M, int64_t N, int64_t K) {
  if (blas_threads() != BlasThreads::Pool || in_parallel_region()) return 1;
  const double by_work = double(M) * double(N) * double(K) / kGemmWorkPerPart;
  const int64_t by_extent = std::max(M, N) / 16;  // parts of at least 16 rows or columns
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({pool_threads(), static_cast<int64_t>(by_work), by_extent})));
}

template <class T, class Fn>
void blas_call(Fn gemm, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  // Row-major C = A B is column-major C^T = B^T A^T.
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(std::max<int64_t>(lda, 1));
  const int lb = static_cast<int>(std::max<int64_t>(ldb, 1));
  const int lc = static_cast<int>(std::max<int64_t>(ldc, 1));
  const T one = 1;
  gemm(&tb, &ta, &m, &n, &k, &one, B, &lb, A, &la, &beta, C, &lc);
}

// C = A B + beta C through BLAS; false when a size exceeds BLAS's int. On the pool, C's longer
// side is cut into parts (16-aligned columns or rows) computed at once by single-threaded calls:
// no BLAS thread spins or waits on another, and each part packs only the operand it needs whole.
template <class T, class Fn>
bool try_blas(Fn gemm, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
              int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (v > INT_MAX) return false;
  const int parts = gemm_parts(M, N, K);
  if (parts == 1) {
    blas_call(gemm, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return true;
  }
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  auto edge = [&](int64_t p) { return p == parts ? extent : (extent * p / parts) / 16 * 16; };
  parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = edge(p), e = edge(p + 1);
      if (by_rows)
        blas_call(gemm, trans_a, trans_b, e - b, N, K, A + (trans_a ? b : b * lda), lda, B, ldb, beta, C + b * ldc, ldc);
      else
        blas_call(gemm, trans_a, trans_b, M, e - b, K, A, lda, B + (trans_b ? b * ldb : b), ldb, beta, C + b, ldc);
    }
  });
  return true;
}
#endif

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

void gemm_accumulate_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc) {
  gemm_dispatch(dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, 1.0, C, ldc);
}

}  // namespace fg
