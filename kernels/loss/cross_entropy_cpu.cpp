#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/lanes.h"
#include "flowgrad/base/parallel.h"
#include "kernels/loss/cross_entropy.h"

namespace fg {
namespace {

// Sum of n values with eight partial accumulators, so the loop vectorises.
template <class T>
T lane_sum(const T* v, int64_t n) {
  T partial[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) partial[j] += v[k + j];
  T sum = 0;
  for (int j = 0; j < 8; ++j) sum += partial[j];
  for (; k < n; ++k) sum += v[k];
  return sum;
}

// One row's logsumexp and sum of logits. Separate simple passes over the row (in cache after
// the first), each vectorised per instruction set (cpu_dispatch.h); `scratch` holds the row's
// exponentials.
template <class T>
FG_CPU_KERNEL void row_stats(const T* __restrict row, int64_t n, T* __restrict scratch, T* lse, T* sum) {
  T m = row_max<32>(row, n);
  T shift = m == -std::numeric_limits<T>::infinity() ? T(0) : m;  // an all -inf row
  for (int64_t j = 0; j < n; ++j) scratch[j] = fn::exp_nonpositive(row[j] - shift);
  *lse = shift + std::log(lane_sum(scratch, n));
  *sum = lane_sum(row, n);
}

// Rows per task: an exp per element is worth a thread from an eighth of the plain-work grain
// (a (1024, 96) loss ran on one thread).
int64_t row_grain(int64_t classes) { return kParallelGrain / 8 / (classes + 1) + 1; }

template <class T>
void forward_rows(const T* x, const int64_t* target, const CrossEntropyArgs& a, T* row_loss, T* lse) {
  parallel_for(a.rows, row_grain(a.classes), [&](int64_t b, int64_t e) {
    std::vector<T> scratch(a.classes);
    for (int64_t r = b; r < e; ++r) {
      const T* row = x + r * a.classes;
      T sx;
      FG_AT_ISA(row_stats(row, a.classes, scratch.data(), lse + r, &sx));
      int64_t t = target[r];
      row_loss[r] = t == a.ignore_index ? T(0) : cross_entropy_row_loss(lse[r], row[t], sx, a);
    }
  });
}

// One row of the gradient, a row that is not ignored.
template <class T>
FG_CPU_KERNEL void grad_row(const T* __restrict row, int64_t t, T lse, T scale, const CrossEntropyArgs& a,
                            T* __restrict dst) {
  T off = static_cast<T>(a.smoothing) / static_cast<T>(a.classes);
  for (int64_t j = 0; j < a.classes; ++j) dst[j] = (fn::exp_nonpositive(row[j] - lse) - off) * scale;
  dst[t] = cross_entropy_logit_grad(row[t], lse, true, scale, a);
}

}  // namespace

void cross_entropy_forward_cpu(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target,
                               const CrossEntropyArgs& a, LossReduce reduce, void* loss,
                               void* lse, void* divisor) {
  visit_float_dtype(dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(loss);
    T* div = static_cast<T*>(divisor);
    *div = T(1);
    if (reduce == LossReduce::None) return forward_rows(static_cast<const T*>(logits), target, a, out, static_cast<T*>(lse));
    std::vector<T> rows(a.rows);
    forward_rows(static_cast<const T*>(logits), target, a, rows.data(), static_cast<T*>(lse));
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < a.rows; ++r) {
      total += rows[r];
      count += target[r] != a.ignore_index;
    }
    if (reduce == LossReduce::Mean) *div = static_cast<T>(count);
    *out = static_cast<T>(reduce == LossReduce::Mean ? total / static_cast<double>(count) : total);
  });
}

void cross_entropy_backward_cpu(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target,
                                const void* lse, const void* grad, bool per_row,
                                const void* divisor, const CrossEntropyArgs& a,
                                void* grad_logits) {
  visit_float_dtype(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *x = static_cast<const T*>(logits), *l = static_cast<const T*>(lse), *g = static_cast<const T*>(grad);
    T div = *static_cast<const T*>(divisor);
    T* out = static_cast<T*>(grad_logits);
    parallel_for(a.rows, row_grain(a.classes), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = x + r * a.classes;
        T* dst = out + r * a.classes;
        int64_t t = target[r];
        if (t == a.ignore_index) {
          std::fill(dst, dst + a.classes, T(0));
          continue;
        }
        FG_AT_ISA(grad_row(row, t, l[r], g[per_row ? r : 0] / div, a, dst));
      }
    });
  });
}

}  // namespace fg
