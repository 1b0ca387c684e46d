#include "kernels/index/index.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "flowgrad/base/parallel.h"

namespace fg {

void gather_cpu(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d,
                int64_t n, int64_t inner, void* out) {
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(out);
    parallel_for(outer * n * inner, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        int64_t o = p / (n * inner), j = p % inner;
        ys[p] = xs[(o * d + idx[p]) * inner + j];
      }
    });
  });
}

void scatter_add_cpu(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer,
                     int64_t d, int64_t n, int64_t inner, void* out) {
  visit_compute_dtype(dtype, "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    const T* ss = static_cast<const T*>(src);
    T* ys = static_cast<T*>(out);
    // Lines (o, j) write disjoint outputs; within a line the order is sequential.
    parallel_for(outer * inner, kParallelGrain / (n + 1) + 1, [&](int64_t b, int64_t e) {
      for (int64_t line = b; line < e; ++line) {
        int64_t o = line / inner, j = line % inner;
        for (int64_t i = 0; i < n; ++i) {
          int64_t p = (o * n + i) * inner + j;
          T& dst = ys[(o * d + idx[p]) * inner + j];
          if constexpr (std::is_same_v<T, bool>) dst = dst || ss[p];
          else dst += ss[p];
        }
      }
    });
  });
}

void index_put_cpu(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t k, void* out) {
  size_t item = itemsize(dtype);
  const char* ss = static_cast<const char*>(src);
  char* ys = static_cast<char*>(out);
  for (int64_t i = 0; i < k; ++i) std::memcpy(ys + idx[i] * item, ss + i * item, item);
}

void index_select_cpu(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d,
                      int64_t n, int64_t inner, void* out) {
  size_t row = itemsize(dtype) * static_cast<size_t>(inner);
  const char* xs = static_cast<const char*>(x);
  char* ys = static_cast<char*>(out);
  parallel_for(outer * n, kParallelGrain / (inner + 1) + 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      int64_t o = p / n, i = p % n;
      std::memcpy(ys + p * row, xs + (o * d + idx[i]) * row, row);
    }
  });
}

void sort_cpu(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t d, int64_t inner, int64_t k,
              bool descending, void* values, int64_t* indices) {
  visit_compute_dtype(dtype, "sort", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* vs = static_cast<T*>(values);
    parallel_for(outer * inner, 64, [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(d);
      for (int64_t line = b; line < e; ++line) {
        int64_t o = line / inner, j = line % inner;
        const T* in = xs + o * d * inner + j;
        auto key = [&](int64_t i) { return in[i * inner]; };
        auto less = [&](int64_t a, int64_t c) {  // NaN is the largest value
          T va = key(a), vc = key(c);
          bool na = va != va, nc = vc != vc;
          if (na || nc) return !na && nc;
          return va < vc;
        };
        std::iota(order.begin(), order.end(), 0);
        if (descending)
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return less(c, a); });
        else
          std::stable_sort(order.begin(), order.end(), less);
        for (int64_t i = 0; i < k; ++i) {
          int64_t p = (o * k + i) * inner + j;
          vs[p] = key(order[i]);
          indices[p] = order[i];
        }
      }
    });
  });
}

int64_t count_true_cpu(const KernelEnv& env, const bool* mask, int64_t n) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += mask[i];
  return count;
}

void nonzero_cpu(const KernelEnv& env, const bool* mask, const int64_t* shape, int ndim, int64_t* coords) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  int64_t row = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!mask[i]) continue;
    int64_t rest = i;
    for (int d = ndim - 1; d >= 0; --d) {
      coords[row * ndim + d] = rest % shape[d];
      rest /= shape[d];
    }
    ++row;
  }
}

}  // namespace fg
