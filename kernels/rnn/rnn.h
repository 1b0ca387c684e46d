// Recurrent layers over a whole sequence: per step one GEMM of the previous hidden state by W_hh
// and one fused pass over the gates, and the backward through time in the same loop shape. The
// input projection gi = x W_ih^T + b_ih of every step is one GEMM made before (ops/rnn.cpp).
// Gate order is PyTorch's: (i, f, g, o) for LSTM, (r, z, n) for GRU. Steps run t = 0..T-1, or
// T-1..0 with `reverse` (a bidirectional layer's second direction); the state before the first
// step is h0 (and c0). All buffers contiguous, one floating dtype (float32 or float64); outputs
// are overwritten.
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

struct RnnSizes {
  int64_t steps, batch, hidden;  // T, N, H
};

// c_t = f c_{t-1} + i g, h_t = o tanh(c_t), with (i, f, g, o) = act(gi_t + h_{t-1} W_hh^T + b_hh).
void lstm_sequence_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s,
                       const void* gi,     // (T, N, 4H)
                       const void* h0,     // (N, H)
                       const void* c0,     // (N, H)
                       const void* w_hh,   // (4H, H)
                       const void* b_hh,   // (4H), or null
                       void* y,            // (T, N, H) h_t
                       void* cs,           // (T, N, H) c_t
                       void* gates);       // (T, N, 4H) the activated gates i, f, g, o
// Backward through time of lstm_sequence_cpu. dgates is the gradient of the gates' inputs, so of
// gi and of h W_hh^T + b_hh alike; dh0 and dc0 are the gradients of the initial state.
void lstm_sequence_backward_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s,
                                const void* dy,     // (T, N, H) gradient of y
                                const void* dcs,    // (T, N, H) gradient of cs
                                const void* gates,  // (T, N, 4H) from the forward
                                const void* cs,     // (T, N, H) from the forward
                                const void* c0,     // (N, H)
                                const void* w_hh,   // (4H, H)
                                void* dgates,       // (T, N, 4H), overwritten
                                void* dh0,          // (N, H), overwritten
                                void* dc0);         // (N, H), overwritten

// r = sig(gi_r + gh_r), z = sig(gi_z + gh_z), n = tanh(gi_n + r gh_n), h_t = (1 - z) n + z h_{t-1},
// with gh = h_{t-1} W_hh^T + b_hh.
void gru_sequence_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s,
                      const void* gi,    // (T, N, 3H)
                      const void* h0,    // (N, H)
                      const void* w_hh,  // (3H, H)
                      const void* b_hh,  // (3H), or null
                      void* y,           // (T, N, H) h_t
                      void* gates,       // (T, N, 3H) the activated gates r, z, n
                      void* ghn);        // (T, N, H) gh_n, which n's gradient reads
// Backward through time of gru_sequence_cpu: the gradients of gi, of gh (which differs from gi's
// in its n part: r gh_n) and of h0.
void gru_sequence_backward_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s,
                               const void* dy,     // (T, N, H) gradient of y
                               const void* gates,  // (T, N, 3H) from the forward
                               const void* ghn,    // (T, N, H) from the forward
                               const void* y,      // (T, N, H) from the forward
                               const void* h0,     // (N, H)
                               const void* w_hh,   // (3H, H)
                               void* dgi,          // (T, N, 3H), overwritten
                               void* dgh,          // (T, N, 3H), overwritten
                               void* dh0);         // (N, H), overwritten

// The same on a CUDA device (CUDA builds only): cuBLAS for the GEMMs, one kernel per step for
// the gates, on env's stream.
void lstm_sequence_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* gi, const void* h0,
                        const void* c0, const void* w_hh, const void* b_hh, void* y, void* cs, void* gates);
void lstm_sequence_backward_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* dy,
                                 const void* dcs, const void* gates, const void* cs, const void* c0,
                                 const void* w_hh, void* dgates, void* dh0, void* dc0);
void gru_sequence_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* gi, const void* h0,
                       const void* w_hh, const void* b_hh, void* y, void* gates, void* ghn);
void gru_sequence_backward_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* dy,
                                const void* gates, const void* ghn, const void* y, const void* h0,
                                const void* w_hh, void* dgi, void* dgh, void* dh0);

}  // namespace fg
