// Matrix-vector products on the CPU: a product of few rows (M <= kGemvRows: a batch of one to a few
// tokens through a linear layer, and the gradient of its input) streams the matrix once, vectorised
// at the instruction-set level in force (FLOWGRAD_ISA: generic, avx2, avx512) and split over the
// pool's threads by output columns when the product is large. gemm_cpu sends float32 and float64
// products of this shape here (gemm_cpu.cpp); nothing is packed.
#pragma once
#include <cstdint>

namespace fg {

constexpr int64_t kGemvRows = 8;

// Whether gemv_cpu takes the row-major product C (M, N) = A (M, K) @ B (K, N) of this layout
// (trans_a: A stored (K, M), likewise trans_b; see gemm.h): M <= kGemvRows, K and N at least 1.
bool gemv_cpu_applies(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

// C (M, N) = A @ B + beta C (beta 0: C only written) + bias (N values broadcast over the rows; null:
// none), for T float or double. B stored transposed (x W^T, W row-major): each C value is the dot
// product of two contiguous rows; B row-major (x W, the gradient of a linear's input): rows of B
// scaled by A's values and summed. Deterministic: every value sums its K products in the same order
// whatever the thread count.
template <class T>
void gemv_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
              int64_t ldb, T beta, T* C, int64_t ldc, const T* bias);

}  // namespace fg
