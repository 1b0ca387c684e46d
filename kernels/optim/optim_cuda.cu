// CUDA optimizer updates: the CPU file's per-element functions (optim.h), one launch per
// parameter buffer. Hyper-parameters and Adam's step counter are read from device memory, so a
// captured CUDA graph replays with the values a scheduler wrote last.
#include "kernels/common/launch.cuh"
#include "kernels/optim/optim.h"

namespace fg {
namespace {

template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, const double* hyper) {  // p, g, buf: (n)
  const SgdCoeffs<T> c = sgd_coeffs<T>(hyper);  // a few loads from a cached line
  FG_GRID_LOOP(i, n)
    sgd_element<T>(p[i], g[i], buf ? buf + i : nullptr, c);
}

// Reads the step count before this update (step_before + 1 is the bias-correction step); the
// counter itself is advanced by increment_step once every block has read it.
template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, const double* hyper,
                            const int64_t* step_before) {  // p, g, m, v: (n)
  __shared__ AdamCoeffs<T> c;
  if (threadIdx.x == 0) c = adam_coeffs<T>(hyper, *step_before + 1);
  __syncthreads();
  FG_GRID_LOOP(i, n)
    adam_element<T>(p[i], g[i], m[i], v[i], c);
}

__global__ void increment_step(int64_t* step) { *step += 1; }

}  // namespace

void sgd_update_cuda(const KernelEnv& env, DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const double* hyper) {
  if (n == 0) return;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(static_cast<T*>(param), static_cast<const T*>(grad),
                                             static_cast<T*>(momentum_buf), n, hyper);
  });
  check_launch("sgd_update");
}

void adam_update_cuda(const KernelEnv& env, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                      const double* hyper, int64_t* step) {
  if (n > 0) {
    visit_float_dtype(dtype, "optimizer", [&](auto tag) {
      using T = decltype(tag);
      adam_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(static_cast<T*>(param), static_cast<const T*>(grad),
                                                static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), n, hyper, step);
    });
  }
  increment_step<<<1, 1, 0, kernel_stream(env)>>>(step);  // same stream: runs after every block of the update
  check_launch("adam_update");
}

}  // namespace fg
