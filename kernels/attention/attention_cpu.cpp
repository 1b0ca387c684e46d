// Flash attention on the CPU: one worker per (batch*head, query block) in the forward pass, one per
// batch*head in the backward pass (dQ is accumulated over key blocks by the worker that owns it,
// so no two workers write the same row). Block products are small loops whose inner loop runs
// over a contiguous row (an axpy), so they vectorise without reassociating a float sum.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/functors.h"
#include "kernels/common/parallel.h"

namespace fg {
namespace {

constexpr int64_t kQueryBlock = 64, kKeyBlock = 64;

// C (M, N) += A (M, K) @ B (K, N), row-major with leading dims; four rows of A share each B row.
template <class T>
FG_CPU_CLONES void gemm_nn_acc(int64_t M, int64_t N, int64_t K, const T* __restrict A, int64_t lda,
                               const T* __restrict B, int64_t ldb, T* __restrict C, int64_t ldc) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) {
    T* c0 = C + i * ldc;
    T *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
    for (int64_t k = 0; k < K; ++k) {
      const T* b = B + k * ldb;
      T a0 = A[i * lda + k], a1 = A[(i + 1) * lda + k], a2 = A[(i + 2) * lda + k], a3 = A[(i + 3) * lda + k];
      for (int64_t j = 0; j < N; ++j) {
        c0[j] += a0 * b[j], c1[j] += a1 * b[j], c2[j] += a2 * b[j], c3[j] += a3 * b[j];
      }
    }
  }
  for (; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      T a = A[i * lda + k];
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += a * B[k * ldb + j];
    }
}

// C (M, N) += A^T @ B with A stored (K, M) and B (K, N).
template <class T>
FG_CPU_CLONES void gemm_tn_acc(int64_t M, int64_t N, int64_t K, const T* __restrict A, int64_t lda,
                               const T* __restrict B, int64_t ldb, T* __restrict C, int64_t ldc) {
  for (int64_t k = 0; k < K; ++k) {
    const T* b = B + k * ldb;
    for (int64_t i = 0; i < M; ++i) {
      T a = A[k * lda + i];
      T* c = C + i * ldc;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

// dst (cols, rows) = src (rows, cols)^T, src with leading dim ld.
template <class T>
void transpose_block(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

// Scores of query rows [i0, i0 + rows) against keys [j0, j0 + cols): s = scale * q k^T + mask,
// written (rows, cols). kt is the key block transposed (E, cols).
template <class T>
void score_block(const AttentionShape& s, const AttentionMask& mask, int64_t bh, const T* q, int64_t i0,
                 int64_t rows, const T* kt, int64_t j0, int64_t cols, T* scores) {
  std::fill(scores, scores + rows * cols, T(0));
  gemm_nn_acc<T>(rows, cols, s.E, q + i0 * s.E, s.E, kt, cols, scores, cols);
  T scale = static_cast<T>(s.scale);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = i0 + r, row = mask.kind == MaskKind::None ? 0 : mask_row_offset(mask, bh, i);
    T* sr = scores + r * cols;
    if (mask.kind == MaskKind::None && (!s.causal || j0 + cols - 1 <= i)) {
      for (int64_t c = 0; c < cols; ++c) sr[c] *= scale;
      continue;
    }
    for (int64_t c = 0; c < cols; ++c) sr[c] = sr[c] * scale + mask_bias<T>(mask, row, i, j0 + c, s.causal);
  }
}

template <class T>
void forward_block(const AttentionShape& s, const AttentionMask& mask, int64_t bh, int64_t i0,
                   const T* q, const T* k, const T* v, T* out, T* lse) {
  int64_t rows = std::min(kQueryBlock, s.L - i0);
  std::vector<T> kt(s.E * kKeyBlock), scores(rows * kKeyBlock), acc(rows * s.Ev, T(0));
  std::vector<T> m(rows, -INFINITY), l(rows, T(0));
  int64_t key_end = attention_key_end(i0 + rows, s.S, s.causal);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
    int64_t cols = std::min(kKeyBlock, key_end - j0);
    transpose_block(k + j0 * s.E, cols, s.E, s.E, kt.data());
    score_block(s, mask, bh, q, i0, rows, kt.data(), j0, cols, scores.data());
    for (int64_t r = 0; r < rows; ++r) {
      T* p = scores.data() + r * cols;
      T block_max = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) block_max = std::max(block_max, p[c]);
      T new_max = std::max(m[r], block_max), base = finite_max(new_max);
      T alpha = fn::exp_any(finite_max(m[r]) - base), sum = 0;
      for (int64_t c = 0; c < cols; ++c) p[c] = fn::exp_any(p[c] - base);
      for (int64_t c = 0; c < cols; ++c) sum += p[c];
      l[r] = l[r] * alpha + sum;
      m[r] = new_max;
      if (alpha != T(1))
        for (int64_t e = 0; e < s.Ev; ++e) acc[r * s.Ev + e] *= alpha;
    }
    gemm_nn_acc<T>(rows, s.Ev, cols, scores.data(), cols, v + j0 * s.Ev, s.Ev, acc.data(), s.Ev);
  }
  for (int64_t r = 0; r < rows; ++r) {  // a fully masked row: 0 / 0 = NaN and lse = -inf
    T inv = T(1) / l[r];
    for (int64_t e = 0; e < s.Ev; ++e) out[(i0 + r) * s.Ev + e] = acc[r * s.Ev + e] * inv;
    lse[i0 + r] = finite_max(m[r]) + std::log(l[r]);
  }
}

// One batch*head: FlashAttention-2 with key blocks outside and query blocks inside.
template <class T>
void backward_head(const AttentionShape& s, const AttentionMask& mask, int64_t bh, const T* q,
                   const T* k, const T* v, const T* out, const T* dout, const T* lse, T* dq, T* dk, T* dv) {
  std::vector<T> d(s.L), kt(s.E * kKeyBlock), vt(s.Ev * kKeyBlock);
  std::vector<T> p(kQueryBlock * kKeyBlock), dp(kQueryBlock * kKeyBlock);
  for (int64_t i = 0; i < s.L; ++i) {
    T sum = 0;
    for (int64_t e = 0; e < s.Ev; ++e) sum += dout[i * s.Ev + e] * out[i * s.Ev + e];
    d[i] = sum;
  }
  std::fill(dq, dq + s.L * s.E, T(0));
  std::fill(dk, dk + s.S * s.E, T(0));
  std::fill(dv, dv + s.S * s.Ev, T(0));
  for (int64_t j0 = 0; j0 < s.S; j0 += kKeyBlock) {
    int64_t cols = std::min(kKeyBlock, s.S - j0);
    transpose_block(k + j0 * s.E, cols, s.E, s.E, kt.data());
    transpose_block(v + j0 * s.Ev, cols, s.Ev, s.Ev, vt.data());
    int64_t first = s.causal ? j0 / kQueryBlock * kQueryBlock : 0;  // rows i < j0 see none of these keys
    for (int64_t i0 = first; i0 < s.L; i0 += kQueryBlock) {
      int64_t rows = std::min(kQueryBlock, s.L - i0);
      score_block(s, mask, bh, q, i0, rows, kt.data(), j0, cols, p.data());
      for (int64_t r = 0; r < rows; ++r)  // lse = -inf (all masked): exp(-inf + inf) = NaN, as the composite
        for (int64_t c = 0; c < cols; ++c) p[r * cols + c] = fn::exp_any(p[r * cols + c] - lse[i0 + r]);
      gemm_tn_acc<T>(cols, s.Ev, rows, p.data(), cols, dout + i0 * s.Ev, s.Ev, dv + j0 * s.Ev, s.Ev);
      std::fill(dp.begin(), dp.begin() + rows * cols, T(0));
      gemm_nn_acc<T>(rows, cols, s.Ev, dout + i0 * s.Ev, s.Ev, vt.data(), cols, dp.data(), cols);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          dp[r * cols + c] = p[r * cols + c] * (dp[r * cols + c] - d[i0 + r]);  // dS
      gemm_nn_acc<T>(rows, s.E, cols, dp.data(), cols, k + j0 * s.E, s.E, dq + i0 * s.E, s.E);
      gemm_tn_acc<T>(cols, s.E, rows, dp.data(), cols, q + i0 * s.E, s.E, dk + j0 * s.E, s.E);
    }
  }
  T scale = static_cast<T>(s.scale);
  for (int64_t i = 0; i < s.L * s.E; ++i) dq[i] *= scale;
  for (int64_t i = 0; i < s.S * s.E; ++i) dk[i] *= scale;
}

}  // namespace

void attention_forward_cpu(DType dtype, const AttentionShape& s, const AttentionMask& mask,
                           const void* q, const void* k, const void* v, void* out, void* lse) {
  visit_float_dtype(dtype, "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    int64_t blocks = (s.L + kQueryBlock - 1) / kQueryBlock;
    int64_t work = s.S * (s.E + s.Ev) * std::min(s.L, kQueryBlock);  // per task
    parallel_for(s.bh * blocks, kParallelGrain / (work + 1) + 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t bh = t / blocks, i0 = t % blocks * kQueryBlock;
        forward_block<T>(s, mask, bh, i0, static_cast<const T*>(q) + bh * s.L * s.E,
                         static_cast<const T*>(k) + bh * s.S * s.E, static_cast<const T*>(v) + bh * s.S * s.Ev,
                         static_cast<T*>(out) + bh * s.L * s.Ev, static_cast<T*>(lse) + bh * s.L);
      }
    });
  });
}

void attention_backward_cpu(DType dtype, const AttentionShape& s, const AttentionMask& mask,
                            const void* q, const void* k, const void* v, const void* out,
                            const void* dout, const void* lse, void* dq, void* dk, void* dv,
                            float* /*workspace*/) {
  visit_float_dtype(dtype, "scaled_dot_product_attention backward", [&](auto tag) {
    using T = decltype(tag);
    int64_t work = s.L * s.S * (s.E + s.Ev);  // per batch*head
    parallel_for(s.bh, kParallelGrain / (work + 1) + 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        int64_t qo = bh * s.L * s.E, ko = bh * s.S * s.E, vo = bh * s.S * s.Ev, oo = bh * s.L * s.Ev;
        backward_head<T>(s, mask, bh, static_cast<const T*>(q) + qo, static_cast<const T*>(k) + ko,
                         static_cast<const T*>(v) + vo, static_cast<const T*>(out) + oo,
                         static_cast<const T*>(dout) + oo, static_cast<const T*>(lse) + bh * s.L,
                         static_cast<T*>(dq) + qo, static_cast<T*>(dk) + ko, static_cast<T*>(dv) + vo);
      }
    });
  });
}

}  // namespace fg
