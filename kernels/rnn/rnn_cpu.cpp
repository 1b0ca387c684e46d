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

// The part of a step one thread runs: batch rows [r0, r1) at hidden units [j0, j1), which are the
// units of panels [u0, u1) of each gate.
struct Part {
  int64_t r0, r1, u0, u1, j0, j1;
  int64_t rows() const { return r1 - r0; }
};

// Each thread of a sequence takes at least this many batch rows of every step, or none.
constexpr int64_t kThreadRows = 8;

// Runs step(i, part) for i = 0 .. count - 1, in order, spread over the threads in one of two
// ways (the values are the same either way: a value's sums never depend on the split). w is the
// packed W_hh of every step's product (its panels: H units per gate), `work` the multiply-adds of
// one step's panel of units.
// By batch rows, when every thread gets at least kThreadRows of them and w fits in one core's
// cache: a thread runs its rows through every step with all of w, and never waits for another
// (one parallel region in all).
// Otherwise by hidden units, step by step: a thread takes whole panels of units (the columns of
// every gate of its units come from its product, its gate pass reads them and its units' state
// only), and a step is one parallel region, since its product needs every unit of the step
// before; each thread reads its share of w only.
// On 2 threads of a Xeon (2 MiB L2, avx512, 2026-12-07), LSTM layers forward and backward, input
// 64, T x N: H = 256 (w 1 MiB), N = 32, T = 50 took 12.3-12.8 ms by rows against 13.3-13.9 by
// units; N = 16 6.2-6.4 against 7.1-7.3; H = 512 (4 MiB), N = 32, T = 20 22.2-22.9 against
// 20.5-20.7; GRU layers alike.
template <class T, class Step>
void over_steps(int64_t count, int64_t N, int64_t H, const PackedB<T>& w, int64_t work, Step step) {
  const int64_t panels = w.group_panels(), w_bytes = packed_size<T>(w.K, w.N, w.groups) * int64_t{sizeof(T)};
  const int64_t groups = std::min<int64_t>(pool_threads(), N / kThreadRows);
  if (groups > 1 && w_bytes <= core_cache_bytes() && count * panels * work >= groups * (int64_t{1} << 18)) {
    parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
      const Part part{N * g0 / groups, N * g1 / groups, 0, panels, 0, H};
      for (int64_t i = 0; i < count; ++i) step(i, part);
    });
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    parallel_for(panels, product_grain(work), [&](int64_t u0, int64_t u1) {
      step(i, Part{0, N, u0, u1, u0 * w.width, std::min(H, u1 * w.width)});
    });
}

// The loop both cells share, forward: per step pre (N, G) = h_{t-1} W_hh^T + b_hh on W_hh packed
// once in one group per gate (packed_gemm.h), then the cell's gate pass over a part's rows and
// units, rows(n, j0, j1, gi_t, pre_t, prev_t, out_t, y_t) with the pointers at the part's first
// row: prev is the state it reads from the step before (LSTM: c, GRU: h; prev0 before the first
// step) and out the state it writes beside y (LSTM: c, GRU: gh_n).
template <class T, class Rows>
void forward_steps(StepOrder order, RnnSizes s, int64_t gates, const T* gi, const T* h0, const T* w, const T* b,
                   const T* prev0, const T* prev, T* out, T* y, T* pre_all, Rows rows) {
  const int64_t N = s.batch, H = s.hidden, G = gates * H, state = N * H;
  const PackedB<T> w_t = pack_b(true, H, G, w, H, gates);
  const int64_t per_gate = w_t.group_panels();
  over_steps(s.steps, N, H, w_t, N * H * gates * w_t.width, [&](int64_t k, const Part& p) {
    const int64_t t = order.at(k), before = order.before(k), at = t * state + p.r0 * H;
    T* pre = pre_all + t * N * G + p.r0 * G;
    const int64_t from = before * state + p.r0 * H;
    const RowsA<T> a = prepare_a(w_t, p.rows(), k ? y + from : h0 + p.r0 * H, H);
    for (int64_t g = 0; g < gates; ++g)
      packed_gemm(w_t, a, b, Store::Overwrite, pre, G, g * per_gate + p.u0, g * per_gate + p.u1);
    rows(p.rows(), p.j0, p.j1, gi + t * N * G + p.r0 * G, pre, k ? prev + from : prev0 + p.r0 * H, out + at,
         y + at);
  });
}

// Backward: per step, from the last, the cell's gate pass over a part's rows and units (which
// reads the carry dh, the gradient reaching h_t from step t + 1, and writes the gradient of the
// gates' inputs), then dh = dgh_t W_hh written over the carry or added to it (`carry`: what the
// gate pass left there). A step's part makes its dh from the step after, then runs its gate pass,
// pass(k, t, prev, part).
template <class T, class GatePass>
void backward_steps(StepOrder order, RnnSizes s, int64_t gates, const T* w, const T* dgh, Store carry, T* dh,
                    GatePass pass) {
  const int64_t N = s.batch, H = s.hidden, G = gates * H;
  const PackedB<T> w_p = pack_b(false, G, H, w, H);
  std::fill(dh, dh + N * H, T(0));  // zero past the last step
  // i = 0 .. steps: k = steps - 1 .. -1, where k = -1 makes dh0 from the first step
  over_steps(s.steps + 1, N, H, w_p, N * G * w_p.width, [&](int64_t i, const Part& p) {
    const int64_t k = s.steps - 1 - i;
    if (k + 1 < s.steps) {
      const RowsA<T> a = prepare_a(w_p, p.rows(), dgh + order.at(k + 1) * N * G + p.r0 * G, G);
      packed_gemm(w_p, a, static_cast<const T*>(nullptr), carry, dh + p.r0 * H, H, p.u0, p.u1);
    }
    if (k >= 0) pass(k, order.at(k), order.before(k), p);
  });
}

template <class T>
void lstm_backward_typed(StepOrder order, RnnSizes s, const T* dy, const T* dcs, const T* gates, const T* cs,
                         const T* c0, const T* w, T* dgates, T* dh0, T* dc0) {
  const int64_t H = s.hidden, state = s.batch * H;
  std::fill(dc0, dc0 + state, T(0));  // the carry of c, zero past the last step
  backward_steps(order, s, 4, w, dgates, Store::Overwrite, dh0, [&](int64_t k, int64_t t, int64_t prev, const Part& p) {
    const int64_t o = p.r0 * H, at = t * state + o;
    FG_AT_ISA(lstm_backward_units<T>(p.rows(), p.j0, p.j1, H, dy + at, dcs + at, gates + 4 * at, cs + at,
                                     k ? cs + prev * state + o : c0 + o, dh0 + o, dc0 + o, dgates + 4 * at));
  });
}

template <class T>
void gru_backward_typed(StepOrder order, RnnSizes s, const T* dy, const T* gates, const T* ghn, const T* y,
                        const T* h0, const T* w, T* dgi, T* dgh, T* dh0) {
  const int64_t H = s.hidden, state = s.batch * H;
  backward_steps(order, s, 3, w, dgh, Store::Accumulate, dh0, [&](int64_t k, int64_t t, int64_t prev, const Part& p) {
    const int64_t o = p.r0 * H, at = t * state + o;
    FG_AT_ISA(gru_backward_units<T>(p.rows(), p.j0, p.j1, H, dy + at, gates + 3 * at, ghn + at,
                                    k ? y + prev * state + o : h0 + o, dh0 + o, dgi + 3 * at, dgh + 3 * at));
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
                     as<T>(cs), as<T>(cs), as<T>(y), as<T>(gates),
                     [&](int64_t n, int64_t j0, int64_t j1, auto... step) {
                       FG_AT_ISA(lstm_forward_units<T>(n, j0, j1, H, step...));
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
                     as<T>(y), as<T>(ghn), as<T>(y), as<T>(gates),
                     [&](int64_t n, int64_t j0, int64_t j1, auto... step) {
                       FG_AT_ISA(gru_forward_units<T>(n, j0, j1, H, step...));
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
