// flowgrad's own float32 GEMM for x86-64 CPUs with AVX-512 (sgemm_cpu.cpp): packed panels, a
// 14 x 32 register tile, the work split over flowgrad's CPU pool. gemm_cpu runs float32 products
// through it where the CPU has AVX-512 and FLOWGRAD_SGEMM is not "blas". Every thread that
// multiplies keeps its two packing buffers for the next call (at most 2 MiB: a 384 x 1024 block of
// B and a 336 x 384 block of A).
#pragma once
#include <cstdint>
#include <optional>

#include "flowgrad/base/op_table.h"

namespace fg {

// What the kernel does to each tile of C as it stores it for the last time: add bias (N floats,
// broadcast over the rows; only with beta 0), then, with `act`, apply that function to every
// value (one a linear_<act> op fuses: Relu, Gelu, GeluTanh, Silu, Tanh, Sigmoid; see
// sgemm_activation_supported), writing the results to `out` (row-major, leading dimension ldo;
// null: in place in C, else C keeps the values before it). With `derivative` (and `out`), C keeps
// the activation's derivative at those values instead, computed as its backward functor with
// gradient 1 (Gelu, GeluTanh and Silu; see sgemm_derivative_supported): the backward then only
// multiplies. A linear layer in one pass over its output, while each tile is in L1, instead of
// three (bias, product, activation).
struct SgemmEpilogue {
  const float* bias = nullptr;
  std::optional<UnaryFn> act;
  float* out = nullptr;
  int64_t ldo = 0;
  bool derivative = false;
};
bool sgemm_activation_supported(UnaryFn act);
bool sgemm_derivative_supported(UnaryFn act);

// Row-major C (M, N) = A (M, K) @ B (K, N) + beta C, beta 0 (C is only written) or 1, then the
// epilogue. trans_a: A is stored (K, M) with leading dimension lda (likewise trans_b). Needs M, N,
// K >= 1, and sgemm_avx512_supported(). Deterministic: every element sums its K products in the
// same order whatever the thread count or the split.
void sgemm_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const SgemmEpilogue& epilogue = {});

// Whether sgemm_avx512 multiplies as dot products of rows: up to 8 rows of a row-major A against a
// B stored transposed (x W^T: a small batch through a linear layer; nothing packed, each element's
// K products summed in 16 lanes, then the lanes).
bool sgemm_avx512_dots(bool trans_a, bool trans_b, int64_t M);

// Whether sgemm_avx512, on more than one thread and without an epilogue, cuts K instead of C: a
// K at least twice M and N (a weight gradient summed over a batch; never dot products) gives each
// thread a stretch of K, the partial products summed at the end, so the bits then depend on the
// thread count.
bool sgemm_avx512_splits_k(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

// Whether this CPU runs sgemm_avx512: cpu_isa() is avx512 (false off x86-64, for compilers without
// it, and below FLOWGRAD_ISA=avx512).
bool sgemm_avx512_supported();

// Who multiplies float32 matrices on the CPU: flowgrad's AVX-512 kernel or the linked BLAS (or,
// without one, the portable blocked kernel). set_sgemm returns what is in use from now on:
// Blas when the kernel is asked for on a CPU without AVX-512. Call it while no GEMM runs.
enum class Sgemm { Avx512, Blas };
Sgemm set_sgemm(Sgemm which);
Sgemm sgemm_in_use();

}  // namespace fg
