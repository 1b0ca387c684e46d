// One query row per head (a decode step over a key/value cache): the flash_attention op's forward
// when L = 1. Only the keys the mask (and causality) lets the query attend are read: a KV cache's
// mask `arange(S) <= position`, computed on the device, keeps the keys past each row's position
// unread, and one compiled plan or captured CUDA graph serves every position. The keys are cut into
// splits of kDecodeSplitKeys (flash-decoding): each split keeps its softmax max, sum and weighted
// values, the splits run over the CPU pool's threads or CUDA blocks, and a second pass combines
// each head's splits and writes its statistics (attention.h). The split size is fixed, so the
// result does not depend on the thread count.
#pragma once
#include <cstdint>

#include "kernels/attention/attention.h"

namespace fg {

constexpr int64_t kDecodeSplitKeys = 128;
inline int64_t attention_decode_splits(int64_t S) { return (S + kDecodeSplitKeys - 1) / kDecodeSplitKeys; }

// attention_forward_cpu for s.L == 1 (float32/float64, strided operands as there): out and stats
// as that function writes them (NaN output and log l = -inf where every key is masked). The
// splits' partial results come from env's scratch.
void attention_decode_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                          const AttentionOperands& x, void* stats);

// The same on CUDA for float32, contiguous operands: q (BH, 1, E), k (BH, S, E), v (BH, S, Ev),
// out (BH, 1, Ev), stats (BH, 1, 2); partials: device memory of BH * splits * (2 + Ev) floats.
// Kernel launches only: no host read, no allocation.
void attention_decode_cuda(const KernelEnv& env, const AttentionShape& s, const AttentionMask& mask, const float* q,
                           const float* k, const float* v, float* out, float* stats, float* partials);

}  // namespace fg
