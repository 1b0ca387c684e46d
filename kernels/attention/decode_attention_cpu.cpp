#include <algorithm>
#include <cmath>
#include <limits>

#include "flowgrad/base/parallel.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/common/vec.h"
#include "kernels/common/workspace.h"

namespace fg {
namespace {

template <class T>
struct DecodeCall {
  const AttentionShape& s;
  const AttentionMask& mask;
  const AttentionOperands& x;
  T* partials;  // (BH, splits, 2 + Ev): max, sum of exp(score - max), then the sum of those times v
  int64_t splits;

  const T* row(const AttentionOperand& o, int64_t bh, int64_t j) const {
    return static_cast<const T*>(o.data) + attention_operand_offset(x, o, bh) + j * o.ld;
  }
  T* partial(int64_t bh, int64_t split) const { return partials + (bh * splits + split) * (2 + s.Ev); }
};

// Keys [k0, k1) of head bh: the scores of the keys the mask lets through (the others are not read),
// their max m, the sum l of exp(score - m) and the sum of exp(score - m) v, into the split's partial
// (m = -inf, l = 0 where every key is masked).
template <class T, int W>
FG_CPU_KERNEL void decode_split(const DecodeCall<T>& c, int64_t bh, int64_t k0, int64_t k1, T* part) {
  using U = typename VecOf<T, W>::unaligned;
  constexpr int64_t L = kLane<T, W>;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t E = c.s.E, Ev = c.s.Ev;
  const T* q = c.row(c.x.q, bh, 0);
  const T scale = static_cast<T>(c.s.scale);
  const int64_t mask_row = c.mask.kind == MaskKind::None ? 0 : mask_row_offset(c.mask, bh, 0);
  T score[kDecodeSplitKeys];
  T m = kNegInf;
  for (int64_t j = k0; j < k1; ++j) {
    const T bias = mask_bias<T>(c.mask, mask_row, 0, j, c.s.causal);
    if (bias == kNegInf) {
      score[j - k0] = kNegInf;
      continue;
    }
    const T* key = c.row(c.x.k, bh, j);
    Vec<T, W> acc0{}, acc1{};  // two chains
    int64_t e = 0;
    for (; e + 2 * L <= E; e += 2 * L) {
      acc0 += *reinterpret_cast<const U*>(q + e) * *reinterpret_cast<const U*>(key + e);
      acc1 += *reinterpret_cast<const U*>(q + e + L) * *reinterpret_cast<const U*>(key + e + L);
    }
    if (e + L <= E) {
      acc0 += *reinterpret_cast<const U*>(q + e) * *reinterpret_cast<const U*>(key + e);
      e += L;
    }
    T dot = lane_sum<T, W>(acc0 + acc1);
    for (; e < E; ++e) dot += q[e] * key[e];
    score[j - k0] = dot * scale + bias;
    m = std::max(m, score[j - k0]);
  }
  T* o = part + 2;
  std::fill(o, o + Ev, T(0));
  T l = 0;
  if (m != kNegInf) {
    for (int64_t j = k0; j < k1; ++j) {
      if (score[j - k0] == kNegInf) continue;
      const T p = std::exp(score[j - k0] - m);
      l += p;
      const T* value = c.row(c.x.v, bh, j);
      int64_t e = 0;
      for (; e + L <= Ev; e += L) *reinterpret_cast<U*>(o + e) += p * *reinterpret_cast<const U*>(value + e);
      for (; e < Ev; ++e) o[e] += p * value[e];
    }
  }
  part[0] = m, part[1] = l;
}

template <class T>
void run_split(const DecodeCall<T>& c, int64_t bh, int64_t k0, int64_t k1, T* part) {
  switch (isa_vector_bytes()) {
    case 64: FG_AT_WIDTH(64, (decode_split<T, 64>(c, bh, k0, k1, part))); return;
    case 32: FG_AT_WIDTH(32, (decode_split<T, 32>(c, bh, k0, k1, part))); return;
    default: FG_AT_WIDTH(16, (decode_split<T, 16>(c, bh, k0, k1, part)));
  }
}

// Head bh's output: the splits' weighted values, each rescaled to the largest max, over the sum of
// their sums; and its statistics (max, log of the sum). NaN where every key is masked.
template <class T>
void combine(const DecodeCall<T>& c, int64_t bh, T* stats) {
  T* out = static_cast<T*>(c.x.out.data) + attention_operand_offset(c.x, c.x.out, bh);
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t p = 0; p < c.splits; ++p) m = std::max(m, c.partial(bh, p)[0]);
  if (m == -std::numeric_limits<T>::infinity()) {
    std::fill(out, out + c.s.Ev, std::numeric_limits<T>::quiet_NaN());
    store_row_stats(stats, bh, m, m);
    return;
  }
  std::fill(out, out + c.s.Ev, T(0));
  T l = 0;
  for (int64_t p = 0; p < c.splits; ++p) {
    const T* part = c.partial(bh, p);
    if (part[1] == T(0)) continue;  // every key of the split masked
    const T w = std::exp(part[0] - m);
    l += w * part[1];
    for (int64_t e = 0; e < c.s.Ev; ++e) out[e] += w * part[2 + e];
  }
  for (int64_t e = 0; e < c.s.Ev; ++e) out[e] /= l;
  store_row_stats(stats, bh, m, std::log(l));
}

template <class T>
void decode_typed(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask, const AttentionOperands& x,
                  T* stats) {
  const int64_t splits = attention_decode_splits(s.S);
  CpuWorkspace workspace(env, static_cast<size_t>(s.bh * splits * (2 + s.Ev)) * sizeof(T));
  DecodeCall<T> c{s, mask, x, static_cast<T*>(workspace.data()), splits};
  // Tasks are (head, split) pairs; a thread takes about 2^15 multiply-adds at least.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / (kDecodeSplitKeys * (s.E + s.Ev) + 1));
  parallel_for(s.bh * splits, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / splits, k0 = t % splits * kDecodeSplitKeys;
      run_split<T>(c, bh, k0, std::min(s.S, k0 + kDecodeSplitKeys), c.partial(bh, t % splits));
    }
  });
  parallel_for(s.bh, std::max<int64_t>(1, 4096 / (s.Ev * splits + 1)), [&](int64_t h0, int64_t h1) {
    for (int64_t bh = h0; bh < h1; ++bh) combine(c, bh, stats);
  });
}

}  // namespace

void attention_decode_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                          const AttentionOperands& x, void* stats) {
  if (dtype == DType::Float64) return decode_typed<double>(env, s, mask, x, static_cast<double*>(stats));
  decode_typed<float>(env, s, mask, x, static_cast<float*>(stats));
}

}  // namespace fg
