// Flash attention on the CPU: one worker per (batch*head, query block) in the forward pass, one per
// batch*head in the backward pass (dQ is accumulated over key blocks by the worker that owns it,
// so no two workers write the same row). Block products go through gemm_cpu (the BLAS for small
// blocks; flowgrad's AVX-512 GEMM takes float32 ones from 2^18 multiply-adds): with OpenBLAS's
// Haswell kernels it beat vectorised axpy loops by 1.2-1.7x at head dims 32-128 (bench_attention.py
// --cpu-time); row loops (exp, max, rescale) are compiled per instruction set. Up to
// kAttentionCpuTile queries and keys a head is one tile (attention_tile_cpu.cpp). Operands are
// strided views: BLAS takes each one's leading dimension.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/attention/attention_cpu_rows.h"
#include "kernels/attention/decode_attention.h"
#include "flowgrad/base/parallel.h"
#include "kernels/linalg/gemm.h"

namespace fg {
namespace {

constexpr int64_t kQueryBlock = 64, kKeyBlock = 64;

// Row loops of the flash loop alone (the shared ones are in attention_cpu_rows.h).
template <class T>
FG_CPU_KERNEL void add_rows(int64_t M, int64_t N, const T* __restrict src, T* __restrict C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += src[i * N + j];
}
// acc = acc * alpha + add over one row.
template <class T>
FG_CPU_KERNEL void rescale_add(T* __restrict acc, const T* __restrict add, int64_t n, T alpha) {
  for (int64_t e = 0; e < n; ++e) acc[e] = acc[e] * alpha + add[e];
}

// C (M, N) (+)= op(A) @ op(B) through gemm_cpu (one thread inside a worker);
// gemm_cpu overwrites, so an accumulating product goes through `scratch` (M * N).
enum class Into : uint8_t { Overwrite, Add };
template <class T>
void block_gemm(Into into, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
                int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc, T* scratch) {
  constexpr DType dt = std::is_same_v<T, float> ? DType::Float32 : DType::Float64;
  if (into == Into::Overwrite) return gemm_cpu(KernelEnv{}, dt, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  gemm_cpu(KernelEnv{}, dt, trans_a, trans_b, M, N, K, A, lda, B, ldb, scratch, N);
  FG_AT_ISA(add_rows(M, N, scratch, C, ldc));
}

// Scores of query rows [i0, i0 + rows) against keys [j0, j0 + cols): s = scale * q k^T + mask,
// written (rows, cols).
template <class T>
void score_block(const AttentionShape& s, const AttentionMask& mask, int64_t bh, Mat<const T> q, int64_t i0,
                 int64_t rows, Mat<const T> k, int64_t j0, int64_t cols, T* scores) {
  block_gemm<T>(Into::Overwrite, false, true, rows, cols, s.E, q.row(i0), q.ld, k.row(j0), k.ld, scores, cols,
                nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = i0 + r, valid = s.causal ? std::clamp<int64_t>(i - j0 + 1, 0, cols) : cols;
    mask_scores_row(mask, bh, i, j0, scores + r * cols, cols, static_cast<T>(s.scale), valid);
  }
}

template <class T>
void forward_block(const AttentionShape& s, const AttentionMask& mask, int64_t bh, int64_t i0, const Head<T>& h,
                   T* stats) {
  int64_t rows = std::min(kQueryBlock, s.L - i0);
  std::vector<T> scores(rows * kKeyBlock), pv(rows * s.Ev), acc(rows * s.Ev, T(0));
  std::vector<T> m(rows, -INFINITY), l(rows, T(0)), alpha(rows);
  int64_t key_end = attention_key_end(i0 + rows, s.S, s.causal);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
    int64_t cols = std::min(kKeyBlock, key_end - j0);
    score_block(s, mask, bh, h.q, i0, rows, h.k, j0, cols, scores.data());
    for (int64_t r = 0; r < rows; ++r) {
      T* p = scores.data() + r * cols;
      T new_max = std::max(m[r], FG_AT_ISA(max_row(p, cols))), base = finite_max(new_max);
      alpha[r] = online_rescale(m[r], base, [](T x) { return fn::exp_any(x); });
      l[r] = l[r] * alpha[r] + FG_AT_ISA(exp_row(p, cols, base));
      m[r] = new_max;
    }
    block_gemm<T>(Into::Overwrite, false, false, rows, s.Ev, cols, scores.data(), cols, h.v.row(j0), h.v.ld,
                  pv.data(), s.Ev, nullptr);
    for (int64_t r = 0; r < rows; ++r) FG_AT_ISA(rescale_add(acc.data() + r * s.Ev, pv.data() + r * s.Ev, s.Ev, alpha[r]));
  }
  for (int64_t r = 0; r < rows; ++r) {  // a fully masked row: 0 / 0 = NaN and log l = -inf
    T inv = T(1) / l[r];
    for (int64_t e = 0; e < s.Ev; ++e) h.out_w.row(i0 + r)[e] = acc[r * s.Ev + e] * inv;
    store_row_stats(stats, i0 + r, m[r], std::log(l[r]));
  }
}

template <class T>
void zero_rows(Mat<T> m, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) std::fill(m.row(i), m.row(i) + cols, T(0));
}

// One batch*head: FlashAttention-2 with key blocks outside and query blocks inside.
template <class T>
void backward_head(const AttentionShape& s, const AttentionMask& mask, int64_t bh, const Head<T>& h, const T* stats) {
  int64_t widest = std::max(s.E, s.Ev);
  T scale = static_cast<T>(s.scale);
  std::vector<T> d(s.L), p(kQueryBlock * kKeyBlock), dp(kQueryBlock * kKeyBlock);
  std::vector<T> scratch(std::max(kQueryBlock, kKeyBlock) * widest);
  for (int64_t i = 0; i < s.L; ++i) d[i] = FG_AT_ISA(dot_row(h.dout.row(i), h.out.row(i), s.Ev));
  zero_rows(h.dq, s.L, s.E), zero_rows(h.dk, s.S, s.E), zero_rows(h.dv, s.S, s.Ev);
  for (int64_t j0 = 0; j0 < s.S; j0 += kKeyBlock) {
    int64_t cols = std::min(kKeyBlock, s.S - j0);
    int64_t first = s.causal ? j0 / kQueryBlock * kQueryBlock : 0;  // rows i < j0 see none of these keys
    for (int64_t i0 = first; i0 < s.L; i0 += kQueryBlock) {
      int64_t rows = std::min(kQueryBlock, s.L - i0);
      score_block(s, mask, bh, h.q, i0, rows, h.k, j0, cols, p.data());
      for (int64_t r = 0; r < rows; ++r)  // log l = -inf (all masked): exp(-inf + inf) = NaN, as the composite
        FG_AT_ISA(exp_row(p.data() + r * cols, cols, stats[2 * (i0 + r)], stats[2 * (i0 + r) + 1]));
      block_gemm<T>(Into::Add, true, false, cols, s.Ev, rows, p.data(), cols, h.dout.row(i0), h.dout.ld,
                    h.dv.row(j0), h.dv.ld, scratch.data());
      block_gemm<T>(Into::Overwrite, false, true, rows, cols, s.Ev, h.dout.row(i0), h.dout.ld, h.v.row(j0),
                    h.v.ld, dp.data(), cols, nullptr);
      for (int64_t r = 0; r < rows; ++r) FG_AT_ISA(ds_row(dp.data() + r * cols, p.data() + r * cols, cols, d[i0 + r], scale));
      block_gemm<T>(Into::Add, false, false, rows, s.E, cols, dp.data(), cols, h.k.row(j0), h.k.ld,
                    h.dq.row(i0), h.dq.ld, scratch.data());
      block_gemm<T>(Into::Add, true, false, cols, s.E, rows, dp.data(), cols, h.q.row(i0), h.q.ld,
                    h.dk.row(j0), h.dk.ld, scratch.data());
    }
  }
}

}  // namespace

void attention_forward_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                           const AttentionOperands& x, void* stats) {
  if (s.L == 1) return attention_decode_cpu(env, dtype, s, mask, x, stats);  // a decode step: splits of keys
  visit_float_dtype(dtype, "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    auto* st = static_cast<T*>(stats);
    if (attention_single_tile(s)) return attention_tile_forward<T>(env, s, mask, x, st);
    SingleThreadedBlas single;  // block products run inside the pool's workers
    int64_t blocks = (s.L + kQueryBlock - 1) / kQueryBlock;
    int64_t work = s.S * (s.E + s.Ev) * std::min(s.L, kQueryBlock);  // per task
    parallel_for(s.bh * blocks, kParallelGrain / (work + 1) + 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t bh = t / blocks, i0 = t % blocks * kQueryBlock;
        forward_block<T>(s, mask, bh, i0, head_of<T>(x, bh), st + bh * s.L * 2);
      }
    });
  });
}

void attention_backward_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                            const AttentionOperands& x, const void* stats) {
  visit_float_dtype(dtype, "scaled_dot_product_attention backward", [&](auto tag) {
    using T = decltype(tag);
    auto* st = static_cast<const T*>(stats);
    if (attention_single_tile(s)) return attention_tile_backward<T>(env, s, mask, x, st);
    int64_t work = s.L * s.S * (s.E + s.Ev);  // per batch*head
    SingleThreadedBlas single;
    parallel_for(s.bh, kParallelGrain / (work + 1) + 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) backward_head<T>(s, mask, bh, head_of<T>(x, bh), st + bh * s.L * 2);
    });
  });
}

}  // namespace fg
