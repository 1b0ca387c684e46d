#include "kernels/rnn/rnn.h"

#include <algorithm>

#include "flowgrad/base/errors.h"
#include "flowgrad/base/parallel.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/linalg/packed_gemm.h"
#include "kernels/rnn/rnn_cells.h"

namespace fg {
namespace {

using rnn::StepOrder;

// Hidden units [j0, j1) of one batch row: restrict parameters, so that the loop vectorises.
template <class T>
FG_CPU_KERNEL void lstm_forward_row(int64_t j0, int64_t j1, int64_t H, const T* __restrict gi, T* __restrict pre,
                                    const T* __restrict c_prev, T* __restrict c, T* __restrict h) {
  for (int64_t j = j0; j < j1; ++j) rnn::lstm_forward_at(j, H, gi, pre, c_prev, c, h);
}
template <class T>
FG_CPU_KERNEL void lstm_backward_row(int64_t j0, int64_t j1, int64_t H, const T* __restrict dy,
                                     const T* __restrict dcs, const T* __restrict gates, const T* __restrict c,
                                     const T* __restrict c_prev, const T* __restrict dh_carry,
                                     T* __restrict dc_carry, T* __restrict dgates) {
  for (int64_t j = j0; j < j1; ++j)
    rnn::lstm_backward_at(j, H, dy, dcs, gates, c, c_prev, dh_carry, dc_carry, dgates);
}
template <class T>
FG_CPU_KERNEL void gru_forward_row(int64_t j0, int64_t j1, int64_t H, const T* __restrict gi, T* __restrict pre,
                                   const T* __restrict h_prev, T* __restrict ghn, T* __restrict h) {
  for (int64_t j = j0; j < j1; ++j) rnn::gru_forward_at(j, H, gi, pre, h_prev, ghn, h);
}
template <class T>
FG_CPU_KERNEL void gru_backward_row(int64_t j0, int64_t j1, int64_t H, const T* __restrict dy,
                                    const T* __restrict gates, const T* __restrict ghn, const T* __restrict h_prev,
                                    T* __restrict dh_carry, T* __restrict dgi, T* __restrict dgh) {
  for (int64_t j = j0; j < j1; ++j) rnn::gru_backward_at(j, H, dy, gates, ghn, h_prev, dh_carry, dgi, dgh);
}

// The gate passes of one step over every batch row, hidden units [j0, j1).
template <class T>
FG_CPU_KERNEL void lstm_forward_units(int64_t N, int64_t j0, int64_t j1, int64_t H, const T* gi, T* pre,
                                      const T* c_prev, T* c, T* h) {
  for (int64_t r = 0; r < N; ++r)
    lstm_forward_row(j0, j1, H, gi + r * 4 * H, pre + r * 4 * H, c_prev + r * H, c + r * H, h + r * H);
}
template <class T>
FG_CPU_KERNEL void lstm_backward_units(int64_t N, int64_t j0, int64_t j1, int64_t H, const T* dy, const T* dcs,
                                       const T* gates, const T* c, const T* c_prev, const T* dh_carry, T* dc_carry,
                                       T* dgates) {
  for (int64_t r = 0; r < N; ++r) {
    const int64_t o = r * H;
    lstm_backward_row(j0, j1, H, dy + o, dcs + o, gates + 4 * o, c + o, c_prev + o, dh_carry + o, dc_carry + o,
                      dgates + 4 * o);
  }
}
template <class T>
FG_CPU_KERNEL void gru_forward_units(int64_t N, int64_t j0, int64_t j1, int64_t H, const T* gi, T* pre,
                                     const T* h_prev, T* ghn, T* h) {
  for (int64_t r = 0; r < N; ++r)
    gru_forward_row(j0, j1, H, gi + r * 3 * H, pre + r * 3 * H, h_prev + r * H, ghn + r * H, h + r * H);
}
template <class T>
FG_CPU_KERNEL void gru_backward_units(int64_t N, int64_t j0, int64_t j1, int64_t H, const T* dy, const T* gates,
                                      const T* ghn, const T* h_prev, T* dh_carry, T* dgi, T* dgh) {
  for (int64_t r = 0; r < N; ++r) {
    const int64_t o = r * H;
    gru_backward_row(j0, j1, H, dy + o, gates + 3 * o, ghn + o, h_prev + o, dh_carry + o, dgi + 3 * o, dgh + 3 * o);
  }
}

// Each thread of a step takes whole panels of hidden units: the columns of every gate of its units
// come from its product, its gate pass reads them and the state of its units only, so a step is
// one parallel region (one wait for the threads) whose product needs every unit of the step before.
// `work` is the multiply-adds of one panel of units.
template <class Units>
void over_units(int64_t panels, int64_t width, int64_t H, int64_t work, Units units) {
  parallel_for(panels, product_grain(work), [&](int64_t u0, int64_t u1) {
    units(u0, u1, u0 * width, std::min(H, u1 * width));
  });
}

// The loop both cells share, forward: per step pre (N, G) = h_{t-1} W_hh^T + b_hh on W_hh packed
// once in one group per gate (packed_gemm.h), then the cell's gate pass over units [j0, j1),
// rows(j0, j1, gi_t, pre_t, prev_t, out_t, y_t): prev is the state it reads from the step before
// (LSTM: c, GRU: h; prev0 before the first step) and out the state it writes beside y (LSTM: c,
// GRU: gh_n).
template <class T, class Rows>
void forward_steps(StepOrder order, RnnSizes s, int64_t gates, const T* gi, const T* h0, const T* w, const T* b,
                   const T* prev0, const T* prev, T* out, T* y, T* pre_all, Rows rows) {
  const int64_t N = s.batch, H = s.hidden, G = gates * H, state = N * H;
  const PackedB<T> w_t = pack_b(true, H, G, w, H, gates);
  const int64_t per_gate = w_t.group_panels();
  for (int64_t k = 0; k < s.steps; ++k) {
    const int64_t t = order.at(k), before = order.before(k);
    T* pre = pre_all + t * N * G;
    const T* h_prev = k ? y + before * state : h0;
    const T* prev_t = k ? prev + before * state : prev0;
    over_units(per_gate, w_t.width, H, N * H * gates * w_t.width, [&](int64_t u0, int64_t u1, int64_t j0,
                                                                       int64_t j1) {
      const RowsA<T> a = prepare_a(w_t, N, h_prev, H);
      for (int64_t g = 0; g < gates; ++g)
        packed_gemm(w_t, a, b, Store::Overwrite, pre, G, g * per_gate + u0, g * per_gate + u1);
      rows(j0, j1, gi + t * N * G, pre, prev_t, out + t * state, y + t * state);
    });
  }
}

// Backward: per step, from the last, the cell's gate pass over units [j0, j1) (which reads the
// carry dh, the gradient reaching h_t from step t + 1, and writes the gradient of the gates'
// inputs), then dh = dgh_t W_hh written over the carry or added to it (`carry`: what the gate pass
// left there). A step's region makes its units' dh from the step after, then runs its gate pass.
template <class T, class GatePass>
void backward_steps(StepOrder order, RnnSizes s, int64_t gates, const T* w, const T* dgh, Store carry, T* dh,
                    GatePass pass) {
  const int64_t N = s.batch, H = s.hidden, G = gates * H;
  const PackedB<T> w_p = pack_b(false, G, H, w, H);
  std::fill(dh, dh + N * H, T(0));  // zero past the last step
  for (int64_t k = s.steps - 1; k >= -1; --k) {  // k = -1: dh0 from the first step
    over_units(w_p.group_panels(), w_p.width, H, N * G * w_p.width, [&](int64_t u0, int64_t u1, int64_t j0,
                                                                          int64_t j1) {
      if (k + 1 < s.steps) {
        const RowsA<T> a = prepare_a(w_p, N, dgh + order.at(k + 1) * N * G, G);
        packed_gemm(w_p, a, static_cast<const T*>(nullptr), carry, dh, H, u0, u1);
      }
      if (k >= 0) pass(k, order.at(k), order.before(k), j0, j1);
    });
  }
}

template <class T>
void lstm_backward_typed(StepOrder order, RnnSizes s, const T* dy, const T* dcs, const T* gates, const T* cs,
                         const T* c0, const T* w, T* dgates, T* dh0, T* dc0) {
  const int64_t N = s.batch, H = s.hidden, G = 4 * H, state = N * H;
  std::fill(dc0, dc0 + state, T(0));  // the carry of c, zero past the last step
  backward_steps(order, s, 4, w, dgates, Store::Overwrite, dh0,
                 [&](int64_t k, int64_t t, int64_t prev, int64_t j0, int64_t j1) {
                   FG_AT_ISA(lstm_backward_units<T>(N, j0, j1, H, dy + t * state, dcs + t * state,
                                                    gates + t * N * G, cs + t * state, k ? cs + prev * state : c0,
                                                    dh0, dc0, dgates + t * N * G));
                 });
}

template <class T>
void gru_backward_typed(StepOrder order, RnnSizes s, const T* dy, const T* gates, const T* ghn, const T* y,
                        const T* h0, const T* w, T* dgi, T* dgh, T* dh0) {
  const int64_t N = s.batch, H = s.hidden, G = 3 * H, state = N * H;
  backward_steps(order, s, 3, w, dgh, Store::Accumulate, dh0,
                 [&](int64_t k, int64_t t, int64_t prev, int64_t j0, int64_t j1) {
                   FG_AT_ISA(gru_backward_units<T>(N, j0, j1, H, dy + t * state, gates + t * N * G,
                                                   ghn + t * state, k ? y + prev * state : h0, dh0,
                                                   dgi + t * N * G, dgh + t * N * G));
                 });
}

template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}
template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}

}  // namespace

void lstm_sequence_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* gi, const void* h0,
                       const void* c0, const void* w_hh, const void* b_hh, void* y, void* cs, void* gates) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "recurrent sequence", [&](auto zero) {
    using T = decltype(zero);
    const int64_t H = s.hidden;
    forward_steps<T>({reverse, s.steps}, s, 4, as<T>(gi), as<T>(h0), as<T>(w_hh), as<T>(b_hh), as<T>(c0),
                     as<T>(cs), as<T>(cs), as<T>(y), as<T>(gates), [&](int64_t j0, int64_t j1, auto... step) {
                       FG_AT_ISA(lstm_forward_units<T>(s.batch, j0, j1, H, step...));
                     });
  });
}

void lstm_sequence_backward_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* dy,
                                const void* dcs, const void* gates, const void* cs, const void* c0,
                                const void* w_hh, void* dgates, void* dh0, void* dc0) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "recurrent sequence", [&](auto zero) {
    using T = decltype(zero);
    lstm_backward_typed<T>({reverse, s.steps}, s, as<T>(dy), as<T>(dcs), as<T>(gates), as<T>(cs),
                           as<T>(c0), as<T>(w_hh), as<T>(dgates), as<T>(dh0), as<T>(dc0));
  });
}

void gru_sequence_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* gi, const void* h0,
                      const void* w_hh, const void* b_hh, void* y, void* gates, void* ghn) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "recurrent sequence", [&](auto zero) {
    using T = decltype(zero);
    const int64_t H = s.hidden;
    forward_steps<T>({reverse, s.steps}, s, 3, as<T>(gi), as<T>(h0), as<T>(w_hh), as<T>(b_hh), as<T>(h0),
                     as<T>(y), as<T>(ghn), as<T>(y), as<T>(gates), [&](int64_t j0, int64_t j1, auto... step) {
                       FG_AT_ISA(gru_forward_units<T>(s.batch, j0, j1, H, step...));
                     });
  });
}

void gru_sequence_backward_cpu(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* dy,
                               const void* gates, const void* ghn, const void* y, const void* h0, const void* w_hh,
                               void* dgi, void* dgh, void* dh0) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "recurrent sequence", [&](auto zero) {
    using T = decltype(zero);
    gru_backward_typed<T>({reverse, s.steps}, s, as<T>(dy), as<T>(gates), as<T>(ghn), as<T>(y),
                          as<T>(h0), as<T>(w_hh), as<T>(dgi), as<T>(dgh), as<T>(dh0));
  });
}

}  // namespace fg
