// CUDA optimizer updates: the CPU file's per-element functions (optim.h), one launch per
// parameter buffer. Hyper-parameters are passed by value at launch.
#include "kernels/common/launch.cuh"
#include "kernels/optim/optim.h"

namespace fg {
namespace {

template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, SgdCoeffs<T> c) {
  FG_GRID_LOOP(i, n)
    sgd_element<T>(p[i], g[i], buf ? buf + i : nullptr, c);
}

template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, AdamCoeffs<T> c) {
  FG_GRID_LOOP(i, n)
    adam_element<T>(p[i], g[i], m[i], v[i], c);
}

}  // namespace

void sgd_update_cuda(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const SgdHyper& h,
                     bool first) {
  if (n == 0) return;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    SgdCoeffs<T> c{T(h.lr), T(h.weight_decay), T(h.momentum), T(1 - h.dampening), h.nesterov, first};
    sgd_kernel<T><<<grid_for(n), kThreads>>>(static_cast<T*>(param), static_cast<const T*>(grad),
                                                 static_cast<T*>(momentum_buf), n, c);
  });
  check_launch("SGD");
}

void adam_update_cuda(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                      const AdamHyper& h, int64_t step) {
  if (n == 0) return;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<T><<<grid_for(n), kThreads>>>(static_cast<T*>(param), static_cast<const T*>(grad),
                                                  static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), n,
                                                  adam_coeffs<T>(h, step));
  });
  check_launch("Adam");
}

}  // namespace fg
