// Fused (flash-style) scaled dot-product attention: no (L, S) score matrix is ever stored (CUDA:
// online softmax over key blocks; CPU: an exact softmax of 8 query rows against all their keys);
// each row's softmax statistics are kept for the backward pass, which recomputes the
// probabilities block by block (FlashAttention-2).
//
// Layout: q (BH, L, E), k (BH, S, E), v (BH, S, Ev), out (BH, L, Ev), stats (BH, L, 2); BH is the
// flattened batch (batch..., heads). CUDA: all contiguous; CPU: strided views (AttentionOperands),
// stats contiguous. The mask is read through
// AttentionMask (broadcast strides), so it is never expanded to (BH, L, S).
#pragma once
#include <cmath>
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/fg_hd.h"

namespace fg {

enum class MaskKind : uint8_t { None, Bool, Additive };

constexpr int kAttentionMaxBatchDims = 6;

// Where mask element (bh, i, j) lives: bh is unflattened over `batch` (row-major), each dim
// with its own stride (0 where the mask broadcasts). Strides are in elements.
struct AttentionMask {
  MaskKind kind = MaskKind::None;
  const void* data = nullptr;  // bool (1 byte) or the compute type (Additive)
  int batch_ndim = 0;
  int64_t batch_shape[kAttentionMaxBatchDims] = {};
  int64_t batch_stride[kAttentionMaxBatchDims] = {};
  int64_t row_stride = 0, col_stride = 0;
};

struct AttentionShape {
  int64_t bh, L, S, E, Ev;
  double scale;  // multiplies q k^T before the mask is added
  bool causal;   // key j > query i is masked (top-left aligned, as the composite)
};

// Offset of mask row (bh, i, 0).
FG_HD int64_t mask_row_offset(const AttentionMask& m, int64_t bh, int64_t i) {
  int64_t off = i * m.row_stride;
  for (int d = m.batch_ndim - 1; d >= 0; --d) {
    off += (bh % m.batch_shape[d]) * m.batch_stride[d];
    bh /= m.batch_shape[d];
  }
  return off;
}

// What the mask adds to score (i, j) whose mask row starts at `row`: 0 or -inf for a bool mask
// (true = attend), the value for an additive one; the causal mask on top.
template <class T>
FG_HD T mask_bias(const AttentionMask& m, int64_t row, int64_t i, int64_t j, bool causal) {
  if (causal && j > i) return -INFINITY;
  if (m.kind == MaskKind::Bool)
    return static_cast<const unsigned char*>(m.data)[row + j * m.col_stride] ? T(0) : T(-INFINITY);
  if (m.kind == MaskKind::Additive) return static_cast<const T*>(m.data)[row + j * m.col_stride];
  return T(0);
}

// Keys [0, key_end) can be unmasked for query rows [.., q_end): all of them unless causal.
FG_HD int64_t attention_key_end(int64_t q_end, int64_t S, bool causal) {
  return causal ? (q_end < S ? q_end : S) : S;
}

// The exp base of a row whose max is m: a row that has seen only -inf (everything masked so far)
// takes 0, so no -inf - -inf NaN appears before the end.
template <class T>
FG_HD T finite_max(T m) {
  return m == -INFINITY ? T(0) : m;
}

// The online-softmax rescale of the sums so far, exp(old_max - new_max) with exp = `exp_fn`: 0 while
// the row has seen only -inf (its sums are 0). Never exp(0 - new_max), which overflows to inf (and
// then 0 * inf = NaN) once a first key tile's scores are all finite and below about -88.7 (an
// additive -1e4 or finfo.min padding mask, an ALiBi bias on a long row).
template <class T, class Exp>
FG_HD T online_rescale(T old_max, T new_base, Exp exp_fn) {
  return old_max == -INFINITY ? T(0) : exp_fn(old_max - new_base);
}

// A row's softmax statistics: its max m (0 while it has seen only -inf) and log l, l the sum of
// exp(s - m); the backward's p = exp((s - m) - log l). Not one logsumexp m + log l: where |m| is
// so large that log l is below its rounding (a row masked entirely by -1e9), that sum would
// round to m and every p would be 1 instead of 1 / S.
template <class T>
FG_HD void store_row_stats(T* stats, int64_t row, T m, T log_l) {
  stats[2 * row] = finite_max(m);
  stats[2 * row + 1] = log_l;
}

// The CPU kernels read and write strided views (the qkv split's q, k, v and head permutes need no
// copy): matrix bh of an operand starts at data + the sum of its batch strides over bh unravelled
// (row-major) over batch_shape, its rows ld elements apart, its columns adjacent. Elements are
// the dtype's compute type.
struct AttentionOperand {
  void* data = nullptr;
  int64_t ld = 0;
  int64_t batch_stride[kAttentionMaxBatchDims] = {};
};
struct AttentionOperands {
  int batch_ndim = 0;
  int64_t batch_shape[kAttentionMaxBatchDims] = {};
  AttentionOperand q, k, v;  // (L, E), (S, E), (S, Ev) per head
  AttentionOperand out;      // (L, Ev): written by the forward, read by the backward
  AttentionOperand dout;     // (L, Ev), backward only
  AttentionOperand dq, dk, dv;  // like q, k, v; written (overwritten) by the backward
};
inline int64_t attention_operand_offset(const AttentionOperands& x, const AttentionOperand& o, int64_t bh) {
  int64_t off = 0;
  for (int d = x.batch_ndim - 1; d >= 0; --d) {
    off += (bh % x.batch_shape[d]) * o.batch_stride[d];
    bh /= x.batch_shape[d];
  }
  return off;
}

// Forward: out = softmax(scale * q k^T + mask) v and each row's statistics (log l = -inf and NaN
// output for a row whose keys are all masked, like the composite). float32/float64.
void attention_forward_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                           const AttentionOperands& x,  // reads q, k, v; writes out
                           void* stats);                // (BH, L, 2), overwritten

// Backward (overwrites dq, dk, dv): with P recomputed from stats and D = rowsum(dout * out),
// dV = P^T dO, dS = P * (dO V^T - D), dQ = scale dS K, dK = scale dS^T Q.
void attention_backward_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                            const AttentionOperands& x,  // reads q, k, v, out, dout; writes dq, dk, dv
                            const void* stats);          // (BH, L, 2)

// The CPU kernels' work on this thread since the last call, which resets it: calls of their
// register-blocked product and its multiply-adds, padding included. A function of the shapes and
// the instruction-set level alone, so a test can check how the work grows with the sequence
// length (tests/cpp/test_attention_work.cpp), where timings on a shared machine cannot.
struct AttentionCpuWork {
  int64_t products = 0, multiply_adds = 0;
};
AttentionCpuWork attention_cpu_work_take();

// CUDA counterparts (CUDA builds only): contiguous operands, float32/bfloat16/float16 (float32
// math, stats float32), head dims up to kAttentionCudaMaxHeadDim.
constexpr int64_t kAttentionCudaMaxHeadDim = 128;

// The CUDA kernels' tiles: 64 query rows per forward block (four warps of 16 on tensor cores), 32
// per backward block, 64 keys per tile; the head dim padded to 32, 64, 96 or 128.
constexpr int64_t kAttentionFwdRows = 64, kAttentionBwdRows = 32, kAttentionKeys = 64;
constexpr int64_t attention_padded_head_dim(int64_t head_dim) {
  return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 96 ? 96 : 128;
}

// Dynamic shared memory per block of the CUDA kernels at padded head dim kD: the launches request
// these numbers and fused_problem compares them with the device's opt-in limit.
struct AttentionSharedBytes {
  int64_t forward, backward;
};
constexpr AttentionSharedBytes attention_cuda_shared_bytes(DType dtype, int64_t kD, bool tensor_cores) {
  constexpr int64_t f = 4, rows = kAttentionFwdRows, keys = kAttentionKeys, brows = kAttentionBwdRows;
  bool wmma = tensor_cores && (dtype == DType::BFloat16 || dtype == DType::Float16);
  int64_t forward = wmma ? f * (rows * keys + 2 * rows * kD + rows) + 2 * ((rows + 2 * keys) * kD + rows * keys)
                         : f * ((rows + 2 * keys) * (kD + 1) + rows * (keys + 1));
  int64_t backward = f * (2 * (keys + brows) * (kD + 1) + 2 * keys * (brows + 1) + 3 * brows);
  return {forward, backward};
}

// Why the CUDA kernels cannot run a head dim of `head_dim` when a block may use at most `limit`
// bytes of shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin), or nullptr when they can.
// sm_86/sm_89 allow 101,376 bytes: kD = 128 needs more (the composite runs instead).
inline const char* attention_cuda_shared_problem(DType dtype, int64_t head_dim, bool tensor_cores, int64_t limit) {
  AttentionSharedBytes need = attention_cuda_shared_bytes(dtype, attention_padded_head_dim(head_dim), tensor_cores);
  if (need.forward > limit || need.backward > limit)
    return "the head dim needs more shared memory per block than this GPU allows";
  return nullptr;
}

// attention_cuda_shared_problem for the device with that index (CUDA builds only).
const char* attention_cuda_device_problem(DType dtype, int64_t head_dim, int device);
void attention_forward_cuda(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                            const void* q,   // (BH, L, E)
                            const void* k,   // (BH, S, E)
                            const void* v,   // (BH, S, Ev)
                            void* out,       // (BH, L, Ev), overwritten
                            void* stats);    // (BH, L, 2) float32, overwritten
// Backward as attention_backward_cpu; workspace (BH, L, E + 1) float32 (dQ sums, D).
void attention_backward_cuda(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                             const void* q, const void* k, const void* v, const void* out,
                             const void* dout, const void* stats, void* dq, void* dk, void* dv,
                             float* workspace);

}  // namespace fg
