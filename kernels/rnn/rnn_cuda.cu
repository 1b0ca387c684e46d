// CUDA recurrent sequences with the CPU kernels' semantics (rnn.h): per step a cuBLAS GEMM of the
// previous state by W_hh and one launch over the (N, H) gate elements, with the math of
// rnn_cells.h; the backward runs the steps in reverse the same way.
#include "kernels/common/launch.cuh"
#include "kernels/linalg/gemm.h"
#include "kernels/rnn/rnn.h"
#include "kernels/rnn/rnn_cells.h"

namespace fg {
namespace {

using rnn::StepOrder;

template <class T>
__global__ void broadcast_rows(const T* b, int64_t rows, int64_t cols, T* out) {  // out (rows, cols) = b (cols)
  FG_GRID_LOOP(i, rows * cols) out[i] = b[i % cols];
}
template <class T>
__global__ void zero_fill(int64_t n, T* out) {
  FG_GRID_LOOP(i, n) out[i] = T(0);
}

template <class T>
__global__ void lstm_forward_step(int64_t N, int64_t H, const T* gi, T* pre, const T* c_prev, T* c, T* h) {
  FG_GRID_LOOP(e, N * H) {
    int64_t r = e / H, j = e % H;
    rnn::lstm_forward_at(j, H, gi + r * 4 * H, pre + r * 4 * H, c_prev + r * H, c + r * H, h + r * H);
  }
}
template <class T>
__global__ void lstm_backward_step(int64_t N, int64_t H, const T* dy, const T* dcs, const T* gates, const T* c,
                                   const T* c_prev, const T* dh_carry, T* dc_carry, T* dgates) {
  FG_GRID_LOOP(e, N * H) {
    int64_t r = e / H, j = e % H, o = r * H;
    rnn::lstm_backward_at(j, H, dy + o, dcs + o, gates + 4 * o, c + o, c_prev + o, dh_carry + o, dc_carry + o,
                          dgates + 4 * o);
  }
}
template <class T>
__global__ void gru_forward_step(int64_t N, int64_t H, const T* gi, T* pre, const T* h_prev, T* ghn, T* h) {
  FG_GRID_LOOP(e, N * H) {
    int64_t r = e / H, j = e % H;
    rnn::gru_forward_at(j, H, gi + r * 3 * H, pre + r * 3 * H, h_prev + r * H, ghn + r * H, h + r * H);
  }
}
template <class T>
__global__ void gru_backward_step(int64_t N, int64_t H, const T* dy, const T* gates, const T* ghn, const T* h_prev,
                                  T* dh_carry, T* dgi, T* dgh) {
  FG_GRID_LOOP(e, N * H) {
    int64_t r = e / H, j = e % H, o = r * H;
    rnn::gru_backward_at(j, H, dy + o, gates + 3 * o, ghn + o, h_prev + o, dh_carry + o, dgi + 3 * o, dgh + 3 * o);
  }
}

// pre (N, G) = h (N, H) W (G, H)^T + b (null: none).
template <class T>
void recurrent_product(const KernelEnv& env, DType dtype, const T* h, const T* w, const T* b, T* pre, int64_t N,
                       int64_t G, int64_t H) {
  if (!b) return gemm_cuda(env, dtype, false, true, N, G, H, h, H, w, H, pre, G);
  broadcast_rows<T><<<grid_for(N * G), kThreads, 0, kernel_stream(env)>>>(b, N, G, pre);
  check_launch("recurrent bias");
  gemm_accumulate_cuda(env, dtype, false, true, N, G, H, h, H, w, H, pre, G);
}

}  // namespace

void lstm_sequence_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* gi, const void* h0,
                        const void* c0, const void* w_hh, const void* b_hh, void* y, void* cs, void* gates) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "lstm_sequence", [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = s.batch, H = s.hidden, G = 4 * H, state = N * H;
    StepOrder order{reverse, s.steps};
    for (int64_t k = 0; k < s.steps; ++k) {
      const int64_t t = order.at(k), prev = order.before(k);
      const T* h_prev = k ? static_cast<const T*>(y) + prev * state : static_cast<const T*>(h0);
      const T* c_prev = k ? static_cast<const T*>(cs) + prev * state : static_cast<const T*>(c0);
      T* pre = static_cast<T*>(gates) + t * N * G;
      recurrent_product<T>(env, dtype, h_prev, static_cast<const T*>(w_hh), static_cast<const T*>(b_hh), pre, N, G, H);
      lstm_forward_step<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(
          N, H, static_cast<const T*>(gi) + t * N * G, pre, c_prev, static_cast<T*>(cs) + t * state,
          static_cast<T*>(y) + t * state);
      check_launch("lstm_sequence");
    }
  });
}

void lstm_sequence_backward_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* dy,
                                 const void* dcs, const void* gates, const void* cs, const void* c0,
                                 const void* w_hh, void* dgates, void* dh0, void* dc0) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "lstm_sequence_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = s.batch, H = s.hidden, G = 4 * H, state = N * H;
    StepOrder order{reverse, s.steps};
    zero_fill<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(state, static_cast<T*>(dh0));
    zero_fill<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(state, static_cast<T*>(dc0));
    check_launch("lstm_sequence_backward");
    for (int64_t k = s.steps - 1; k >= 0; --k) {
      const int64_t t = order.at(k), prev = order.before(k);
      const T* c_prev = k ? static_cast<const T*>(cs) + prev * state : static_cast<const T*>(c0);
      T* dg = static_cast<T*>(dgates) + t * N * G;
      lstm_backward_step<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(
          N, H, static_cast<const T*>(dy) + t * state, static_cast<const T*>(dcs) + t * state,
          static_cast<const T*>(gates) + t * N * G, static_cast<const T*>(cs) + t * state, c_prev,
          static_cast<const T*>(dh0), static_cast<T*>(dc0), dg);
      check_launch("lstm_sequence_backward");
      gemm_cuda(env, dtype, false, false, N, H, G, dg, G, w_hh, H, dh0, H);
    }
  });
}

void gru_sequence_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* gi, const void* h0,
                       const void* w_hh, const void* b_hh, void* y, void* gates, void* ghn) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "gru_sequence", [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = s.batch, H = s.hidden, G = 3 * H, state = N * H;
    StepOrder order{reverse, s.steps};
    for (int64_t k = 0; k < s.steps; ++k) {
      const int64_t t = order.at(k), prev = order.before(k);
      const T* h_prev = k ? static_cast<const T*>(y) + prev * state : static_cast<const T*>(h0);
      T* pre = static_cast<T*>(gates) + t * N * G;
      recurrent_product<T>(env, dtype, h_prev, static_cast<const T*>(w_hh), static_cast<const T*>(b_hh), pre, N, G, H);
      gru_forward_step<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(
          N, H, static_cast<const T*>(gi) + t * N * G, pre, h_prev, static_cast<T*>(ghn) + t * state,
          static_cast<T*>(y) + t * state);
      check_launch("gru_sequence");
    }
  });
}

void gru_sequence_backward_cuda(const KernelEnv& env, DType dtype, bool reverse, RnnSizes s, const void* dy,
                                const void* gates, const void* ghn, const void* y, const void* h0,
                                const void* w_hh, void* dgi, void* dgh, void* dh0) {
  if (s.batch == 0) return;
  visit_float_dtype(dtype, "gru_sequence_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t N = s.batch, H = s.hidden, G = 3 * H, state = N * H;
    StepOrder order{reverse, s.steps};
    zero_fill<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(state, static_cast<T*>(dh0));
    check_launch("gru_sequence_backward");
    for (int64_t k = s.steps - 1; k >= 0; --k) {
      const int64_t t = order.at(k), prev = order.before(k);
      const T* h_prev = k ? static_cast<const T*>(y) + prev * state : static_cast<const T*>(h0);
      T* dgh_t = static_cast<T*>(dgh) + t * N * G;
      gru_backward_step<T><<<grid_for(state), kThreads, 0, kernel_stream(env)>>>(
          N, H, static_cast<const T*>(dy) + t * state, static_cast<const T*>(gates) + t * N * G,
          static_cast<const T*>(ghn) + t * state, h_prev, static_cast<T*>(dh0), static_cast<T*>(dgi) + t * N * G,
          dgh_t);
      check_launch("gru_sequence_backward");
      gemm_accumulate_cuda(env, dtype, false, false, N, H, G, dgh_t, G, w_hh, H, dh0, H);
    }
  });
}

}  // namespace fg
