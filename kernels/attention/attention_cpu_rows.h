// Internal to the CPU attention kernels (attention_tile_cpu.cpp, dispatched from attention_cpu.cpp):
// one head's operands, the exp of a score and the scaling and masking of a row of scores (compiled
// per instruction set: cpu_dispatch.h). Internal linkage (each including file keeps its own clones).
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/functors.h"

namespace fg {
namespace {

// One head's matrix of an operand: rows `ld` elements apart, columns adjacent.
template <class T>
struct Mat {
  T* data;
  int64_t ld;
  T* row(int64_t i) const { return data + i * ld; }
};

// Head bh of every operand (bh unravelled over the batch shape).
template <class T>
struct Head {
  Mat<const T> q, k, v, out, dout;
  Mat<T> out_w, dq, dk, dv;  // outputs: out (forward), dq, dk, dv (backward)
};
template <class T>
Head<T> head_of(const AttentionOperands& x, int64_t bh) {
  auto mat = [&](const AttentionOperand& o) {
    return Mat<T>{o.data ? static_cast<T*>(o.data) + attention_operand_offset(x, o, bh) : nullptr, o.ld};
  };
  auto in = [&](const AttentionOperand& o) { Mat<T> m = mat(o); return Mat<const T>{m.data, m.ld}; };
  return {in(x.q), in(x.k), in(x.v), in(x.out), in(x.dout), mat(x.out), mat(x.dq), mat(x.dk), mat(x.dv)};
}

using fn::exp_nonpositive;  // exp of a score less its row's max (functors.h)

// x[c] *= scale for c < valid; -inf from `valid` on (the causal cut, padding).
template <class T>
FG_CPU_KERNEL void scale_row(T* __restrict x, int64_t n, T scale, int64_t valid) {
  for (int64_t c = 0; c < n; ++c) x[c] = c < valid ? x[c] * scale : T(-INFINITY);
}
// Raw q.k products x of query row i against keys [j0, j0 + n) made scores in place: times `scale`,
// plus the mask, -inf from key j0 + valid on (the causal cut, padding columns).
template <class T>
void mask_scores_row(const AttentionMask& mask, int64_t bh, int64_t i, int64_t j0, T* x, int64_t n, T scale,
                     int64_t valid) {
  FG_AT_ISA(scale_row(x, n, scale, valid));
  if (mask.kind == MaskKind::None) return;
  int64_t row = mask_row_offset(mask, bh, i);
  for (int64_t c = 0; c < valid; ++c) x[c] += mask_bias<T>(mask, row, i, j0 + c, false);
}

}  // namespace

// The kernels of attention_tile_cpu.cpp: as attention_forward_cpu / attention_backward_cpu for
// T = float or double, over every batch*head; the tiles' buffers come from env's scratch
// (kernels/common/workspace.h).
template <class T>
void attention_tile_forward(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask,
                            const AttentionOperands& x, T* stats);
template <class T>
void attention_tile_backward(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask,
                             const AttentionOperands& x, const T* stats);

}  // namespace fg
