// The gate math of one element j of one batch row, written once for the CPU loops (rnn_cpu.cpp)
// and the CUDA kernels (rnn_cuda.cu). A row holds the gates side by side: gate k of hidden unit
// j is at k * H + j. `pre` is the recurrent product h_{t-1} W_hh^T + b_hh of the row; the forward
// functions overwrite it with the activated gates, which the backward functions read.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/functors.h"

namespace fg::rnn {

// Step k of a sequence loop runs time index at(k); its state comes from the step before(k), or
// from h0 / c0 for k == 0.
struct StepOrder {
  bool reverse;
  int64_t steps;
  int64_t at(int64_t k) const { return reverse ? steps - 1 - k : k; }
  int64_t before(int64_t k) const { return reverse ? steps - k : k - 1; }
};

// The gates' activations. A step's forward runs five (LSTM) or three (GRU) per hidden unit, so in
// float32 they are written to vectorise into few instructions: no select but the clamps (min and
// max) and one division each, where fn::Sigmoid and fn::Tanh, which keep every float to its last
// denormal, take blends (three micro-ops each at avx2) and two paths. sigmoid is
// 1 / (1 + e^-x) with -x held to [-87, 87] (below -87 it gives 1.6e-38 for smaller values);
// tanh |x| is -m / (2 + m) with m = e^(-2|x|) - 1 (no cancellation near 0; 2|x| held to 60, far
// from e^y's denormals, each a microcode assist), its sign x's. The forward gate pass of the LSTM
// benchmark's step (N = 32, H = 256) took 2.7 instead of 5.0 ns a unit at avx2, 1.6 instead of 2.7
// at avx512 (Xeon, 2026-12-07). Within 2.4 ulp of float64 for sigmoid above 1e-37 and 2.5 ulp for
// tanh (fn's: 2.3 and 1.9); NaN stays NaN (tests/cpp/test_rnn_gates.cpp). float64 uses fn's.
template <class T>
FG_HD T gate_sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>) {
    float y = -x;
    y = y < -87.0f ? -87.0f : y;
    y = y > 87.0f ? 87.0f : y;
    return 1.0f / (1.0f + fn::exp_normal_f32(y));
  } else {
    return fn::Sigmoid{}(x);
  }
}
template <class T>
FG_HD T gate_tanh(T x) {
  if constexpr (std::is_same_v<T, float>) {
    float y = -2.0f * fn::abs(x);
    y = y < -60.0f ? -60.0f : y;  // tanh is 1 from |x| = 9.01; far from e^y's denormals
    float m = fn::expm1_nonpositive_f32(y);
    return std::copysign(-m / (2.0f + m), x);
  } else {
    return fn::Tanh{}(x);
  }
}

template <class T>
FG_HD void lstm_forward_at(int64_t j, int64_t H, const T* gi, T* pre, const T* c_prev, T* c, T* h) {
  T i = gate_sigmoid(gi[j] + pre[j]), f = gate_sigmoid(gi[H + j] + pre[H + j]);
  T g = gate_tanh(gi[2 * H + j] + pre[2 * H + j]), o = gate_sigmoid(gi[3 * H + j] + pre[3 * H + j]);
  T c_next = f * c_prev[j] + i * g;
  c[j] = c_next;
  h[j] = o * gate_tanh(c_next);
  pre[j] = i, pre[H + j] = f, pre[2 * H + j] = g, pre[3 * H + j] = o;
}

// dh_carry and dc_carry hold the gradients reaching h_t and c_t from step t + 1; dc_carry is
// overwritten with c_{t-1}'s (dh_carry's is the GEMM dgates W_hh that follows).
template <class T>
FG_HD void lstm_backward_at(int64_t j, int64_t H, const T* dy, const T* dcs, const T* gates, const T* c,
                            const T* c_prev, const T* dh_carry, T* dc_carry, T* dgates) {
  T i = gates[j], f = gates[H + j], g = gates[2 * H + j], o = gates[3 * H + j];
  T dh = dy[j] + dh_carry[j], tc = gate_tanh(c[j]);
  T dc = dcs[j] + dc_carry[j] + dh * o * (T(1) - tc * tc);
  dgates[j] = dc * g * i * (T(1) - i);
  dgates[H + j] = dc * c_prev[j] * f * (T(1) - f);
  dgates[2 * H + j] = dc * i * (T(1) - g * g);
  dgates[3 * H + j] = dh * tc * o * (T(1) - o);
  dc_carry[j] = dc * f;
}

template <class T>
FG_HD void gru_forward_at(int64_t j, int64_t H, const T* gi, T* pre, const T* h_prev, T* ghn, T* h) {
  T r = gate_sigmoid(gi[j] + pre[j]), z = gate_sigmoid(gi[H + j] + pre[H + j]);
  T gh_n = pre[2 * H + j];
  T n = gate_tanh(gi[2 * H + j] + r * gh_n);
  ghn[j] = gh_n;
  h[j] = (T(1) - z) * n + z * h_prev[j];
  pre[j] = r, pre[H + j] = z, pre[2 * H + j] = n;
}

// dh_carry holds the gradient reaching h_t from step t + 1 and is overwritten with the part of
// h_{t-1}'s that does not pass through W_hh (dh z); the GEMM dgh W_hh is added to it after.
template <class T>
FG_HD void gru_backward_at(int64_t j, int64_t H, const T* dy, const T* gates, const T* ghn, const T* h_prev,
                           T* dh_carry, T* dgi, T* dgh) {
  T r = gates[j], z = gates[H + j], n = gates[2 * H + j];
  T dh = dy[j] + dh_carry[j];
  T dn = dh * (T(1) - z) * (T(1) - n * n);
  T dr = dn * ghn[j] * r * (T(1) - r);
  T dz = dh * (h_prev[j] - n) * z * (T(1) - z);
  dgi[j] = dgh[j] = dr;
  dgi[H + j] = dgh[H + j] = dz;
  dgi[2 * H + j] = dn;
  dgh[2 * H + j] = dn * r;
  dh_carry[j] = dh * z;
}

}  // namespace fg::rnn
