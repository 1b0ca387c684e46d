#include "kernels/optim/optim.h"

#include <cmath>

#include "kernels/common/parallel.h"

namespace fg {
using std::pow;
using std::sqrt;

void sgd_update_cpu(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n, const double* hyper) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buf);
    const SgdCoeffs<T> c = sgd_coeffs<T>(hyper);
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) {
      T* __restrict pp = p;
      const T* __restrict gg = g;
      T* __restrict bb = buf;
      if (!bb) {
        for (int64_t i = b; i < e; ++i) sgd_element<T>(pp[i], gg[i], nullptr, c);
        return;
      }
      for (int64_t i = b; i < e; ++i) sgd_element<T>(pp[i], gg[i], bb + i, c);
    });
  });
}

void adam_update_cpu(DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                     const double* hyper, int64_t* step) {
  const int64_t count = ++*step;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    const AdamCoeffs<T> c = adam_coeffs<T>(hyper, count);
    parallel_for(n, kParallelGrain, [=](int64_t b, int64_t e) {
      T* __restrict pp = p;
      T* __restrict mm = m;
      T* __restrict vv = v;
      const T* __restrict gg = g;
      for (int64_t i = b; i < e; ++i) adam_element<T>(pp[i], gg[i], mm[i], vv[i], c);
    });
  });
}

double sum_squares_cpu(DType dtype, const void* x, int64_t n) {
  double total = 0;
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x);
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  });
  return total;
}

}  // namespace fg
