// One query row per head on CUDA (decode_attention.h): one block per (head, split of
// kDecodeSplitKeys keys), a thread per key; masked keys are not read, and the mask is device memory
// (a captured graph serves every position). A second kernel combines each head's splits.
#include <cmath>

#include "kernels/attention/decode_attention.h"
#include "kernels/common/launch.cuh"

namespace fg {
namespace {

constexpr int kDecodeThreads = 128;
static_assert(kDecodeThreads == kDecodeSplitKeys, "a thread per key of a split");

// Block (bh, split): thread t scores key split * 128 + t (unless masked), the block's max m and sum
// l of exp(score - m), then each thread sums p v over the split's keys for its output columns.
// partials (BH, splits, 2 + Ev): m, l, the weighted values (m = -inf, l = 0: every key masked).
__global__ void __launch_bounds__(kDecodeThreads)
decode_split_kernel(AttentionShape s, AttentionMask mask, const float* q,  // (BH, 1, E)
                    const float* k,                                         // (BH, S, E)
                    const float* v,                                         // (BH, S, Ev)
                    float* partials) {
  __shared__ float p[kDecodeThreads];
  __shared__ float reduce[kDecodeThreads];
  const int64_t bh = blockIdx.x, splits = gridDim.y, k0 = static_cast<int64_t>(blockIdx.y) * kDecodeSplitKeys;
  const int t = threadIdx.x;
  const int64_t j = k0 + t;
  float score = -INFINITY;
  if (j < s.S) {
    const int64_t row = mask.kind == MaskKind::None ? 0 : mask_row_offset(mask, bh, 0);
    const float bias = mask_bias<float>(mask, row, 0, j, s.causal);
    if (bias != -INFINITY) {
      const float* key = k + (bh * s.S + j) * s.E;
      const float* query = q + bh * s.E;
      float dot = 0.f;
      for (int64_t e = 0; e < s.E; ++e) dot += query[e] * key[e];
      score = dot * static_cast<float>(s.scale) + bias;
    }
  }
  reduce[t] = score;
  __syncthreads();
  for (int half = kDecodeThreads / 2; half > 0; half /= 2) {
    if (t < half) reduce[t] = fmaxf(reduce[t], reduce[t + half]);
    __syncthreads();
  }
  const float m = reduce[0];
  __syncthreads();
  p[t] = score == -INFINITY ? 0.f : expf(score - m);
  reduce[t] = p[t];
  __syncthreads();
  for (int half = kDecodeThreads / 2; half > 0; half /= 2) {
    if (t < half) reduce[t] += reduce[t + half];
    __syncthreads();
  }
  float* part = partials + (bh * splits + blockIdx.y) * (2 + s.Ev);
  if (t == 0) part[0] = m, part[1] = reduce[0];
  const int64_t count = s.S - k0 < kDecodeSplitKeys ? s.S - k0 : kDecodeSplitKeys;
  const float* values = v + (bh * s.S + k0) * s.Ev;
  for (int64_t e = t; e < s.Ev; e += kDecodeThreads) {
    float acc = 0.f;
    for (int64_t i = 0; i < count; ++i)
      if (p[i] != 0.f) acc += p[i] * values[i * s.Ev + e];  // a masked key's values are not read
    part[2 + e] = acc;
  }
}

// Block bh: out (bh, :) = the splits rescaled to the largest max over their summed sums, and the
// statistics (attention.h); NaN where every key is masked.
__global__ void decode_combine_kernel(AttentionShape s, int64_t splits,
                                      const float* partials,  // (BH, splits, 2 + Ev)
                                      float* out,             // (BH, 1, Ev)
                                      float* stats) {         // (BH, 1, 2)
  const int64_t bh = blockIdx.x, width = 2 + s.Ev;
  const float* base = partials + bh * splits * width;
  float m = -INFINITY;
  for (int64_t p = 0; p < splits; ++p) m = fmaxf(m, base[p * width]);
  float l = 0.f;
  if (m != -INFINITY)
    for (int64_t p = 0; p < splits; ++p)
      if (base[p * width + 1] != 0.f) l += expf(base[p * width] - m) * base[p * width + 1];
  for (int64_t e = threadIdx.x; e < s.Ev; e += blockDim.x) {
    float acc = 0.f;
    if (m != -INFINITY)
      for (int64_t p = 0; p < splits; ++p)
        if (base[p * width + 1] != 0.f) acc += expf(base[p * width] - m) * base[p * width + 2 + e];
    out[bh * s.Ev + e] = m == -INFINITY ? NAN : acc / l;
  }
  if (threadIdx.x == 0) store_row_stats(stats, bh, m, m == -INFINITY ? -INFINITY : logf(l));
}

}  // namespace

void attention_decode_cuda(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask, const float* q,
                           const float* k, const float* v, float* out, float* stats, float* partials) {
  const int64_t splits = attention_decode_splits(s.S);
  FG_CHECK(s.bh <= INT32_MAX && splits <= 65535, Value, "scaled_dot_product_attention on cuda: ", s.bh, " heads x ",
           splits, " key splits exceed one launch");
  if (s.bh == 0 || splits == 0) return;
  decode_split_kernel<<<dim3(static_cast<unsigned>(s.bh), static_cast<unsigned>(splits)), kDecodeThreads, 0,
                        kernel_stream(env)>>>(s, mask, q, k, v, partials);
  check_launch("scaled_dot_product_attention");
  decode_combine_kernel<<<static_cast<unsigned>(s.bh), 64, 0, kernel_stream(env)>>>(s, splits, partials, out, stats);
  check_launch("scaled_dot_product_attention");
}

}  // namespace fg
