// Attention on the CPU: a decode step (one query) splits its keys (decode_attention_cpu.cpp); every
// other shape runs the register-blocked kernels of attention_tile_cpu.cpp, one worker per group of
// batch*heads, at the instruction-set level in force. Operands are strided views.
#include "kernels/attention/attention_cpu_rows.h"
#include "kernels/attention/decode_attention.h"

namespace fg {

void attention_forward_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                           const AttentionOperands& x, void* stats) {
  if (s.L == 1) return attention_decode_cpu(env, dtype, s, mask, x, stats);  // a decode step: splits of keys
  visit_float_dtype(dtype, "scaled_dot_product_attention", [&](auto tag) {
    using T = decltype(tag);
    attention_tile_forward<T>(env, s, mask, x, static_cast<T*>(stats));
  });
}

void attention_backward_cpu(const KernelEnv& env, DType dtype, const AttentionShape& s, const AttentionMask& mask,
                            const AttentionOperands& x, const void* stats) {
  visit_float_dtype(dtype, "scaled_dot_product_attention backward", [&](auto tag) {
    using T = decltype(tag);
    attention_tile_backward<T>(env, s, mask, x, static_cast<const T*>(stats));
  });
}

}  // namespace fg
