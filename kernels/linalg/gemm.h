// Row-major GEMM: C (M, N) = A (M, K) @ B (K, N), with C overwritten (beta = 0).
// trans_a: A is stored as (K, M) with leading dimension lda (likewise trans_b).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/op_table.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

void gemm_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc);

// The same on CUDA device memory through cuBLAS (CUDA builds only): float32, float64, and
// float16/bfloat16 with float32 accumulation (cublasGemmEx).
void gemm_cuda(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc);
// Makes this thread's cuBLAS handle ready for its current stream (handle and workspace made
// now): registered with CUDA graph capture, which calls it before capturing, since neither may be made during capture.
// Does nothing when cuBLAS cannot be loaded (the captured gemm then reports why).
void gemm_cuda_prepare_stream();
// `batches` products in one cuBLAS call (cublasGemmStridedBatchedEx): matrix i of A starts at
// A + i * stride_a elements (stride 0 broadcasts one matrix), likewise B and C.
void gemm_batched_cuda(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb,
                       int64_t stride_b, void* C, int64_t ldc, int64_t stride_c, int64_t batches);
// C = A @ B + C (beta = 1): linear writes its broadcast bias into C, then multiplies onto it
// (PyTorch's addmm). Same arguments as gemm_cpu / gemm_cuda.
void gemm_accumulate_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc);
// C = A @ B + bias (N values broadcast over the rows; null: none), then, with `act`, act(C) into
// `out` (leading dimension ldo; null: in place), C keeping the product or, with `derivative`, the
// activation's derivative there (SgemmEpilogue), in one pass over C, where the float32 product runs
// on flowgrad's AVX-512 kernel (sgemm.h), or, without an activation, where it has at most kGemvRows
// rows (float32 or float64: gemv.h, the bias added as each value is stored). Returns false, writing
// nothing, elsewhere (another dtype or CPU, a shape left to the BLAS, an empty product, an activation
// it lacks): the caller then adds the bias and applies the activation itself.
bool gemm_epilogue_cpu(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       const void* A, int64_t lda, const void* B, int64_t ldb, const void* bias,
                       std::optional<UnaryFn> act, void* out, int64_t ldo, void* C, int64_t ldc,
                       bool derivative = false);
// Whether a float32 product of this shape and layout runs on flowgrad's AVX-512 kernel with its
// threads splitting K (sgemm.h): it then wants every thread of the pool, not one.
bool gemm_cpu_splits_k(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);
void gemm_accumulate_cuda(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N,
                          int64_t K, const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc);

// The portable cache-blocked kernel used when no BLAS is linked and for integer types.
template <class T>
void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
                  int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc);


// Name of the BLAS the build links ("OpenBLAS", "none" for the blocked fallback, ...).
const char* blas_name();
// What fg.build_config() reports about it: the FLOWGRAD_BLAS setting, the library file linked
// ("" without BLAS) and, for OpenBLAS, the CPU core its kernels were picked for ("SkylakeX") and
// its build string (version, DYNAMIC_ARCH, ...); "" when the library does not say.
struct BlasInfo {
  std::string setting, library, core, config;
};
BlasInfo blas_info();

}  // namespace fg
