// Products that share one B across many calls of few rows each: the per-step products of a
// recurrence (h_{t-1} W_hh^T forward, dgates_t W_hh backward; kernels/rnn). B is packed once into
// column panels of the level's vector width (FLOWGRAD_ISA), and each product then streams the
// panels against a block of A's rows held in registers: nothing is packed per call, where a GEMM
// packs B again every time. At generic (SSE2, no broadcast from memory) A's values are first spread
// over whole vectors, once per product instead of once per panel.
// float32 and float64. Deterministic: every value sums its K products in order, whatever the
// thread count.
#pragma once
#include <cstdint>
#include <vector>

namespace fg {

// B (K, N) in panels of `width` columns, panel p's rows contiguous (K x width values, the last
// panel's missing columns zero).
template <class T>
struct PackedB {
  int64_t K = 0, N = 0, width = 0, vector_bytes = 0;
  const T* panels = nullptr;
  std::vector<T> own;  // the panels when larger than the thread's kept buffer
};

// Packs B (K, N), stored (N, K) with trans_b (x W^T), rows ldb apart, for the level in force, into
// the calling thread's packing buffer, kept for the next call up to 2 MiB (as sgemm.h's; a 1024 x
// 256 float32 W_hh), so the result is valid until this thread packs again; larger ones into `own`.
template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb);

enum class Store { Overwrite, Accumulate };

// C (M, N) = A (M, K, row-major, rows lda apart) @ B + bias (N values broadcast over the rows;
// null: none), written over C or (Store::Accumulate) added to it. Run at the level b was packed for.
template <class T>
void packed_gemm(const PackedB<T>& b, int64_t M, const T* A, int64_t lda, const T* bias, Store store, T* C,
                 int64_t ldc);

}  // namespace fg
