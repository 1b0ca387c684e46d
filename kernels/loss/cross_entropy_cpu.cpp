#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/common/parallel.h"
#include "kernels/loss/cross_entropy.h"

namespace fg {
namespace {

// One row's logsumexp, row loss (0 when ignored): a max pass, then one pass for the sum of
// exponentials and of logits (the row is in cache by then).
template <class T>
void forward_rows(const T* x, const int64_t* target, const CrossEntropyArgs& a, T* row_loss, T* lse) {
  parallel_for(a.rows, kParallelGrain / (a.classes + 1) + 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = x + r * a.classes;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < a.classes; ++j) m = row[j] > m ? row[j] : m;
      T shift = m == -std::numeric_limits<T>::infinity() ? T(0) : m;  // an all -inf row
      T s = 0, sx = 0;
      for (int64_t j = 0; j < a.classes; ++j) {
        s += fn::exp_any(row[j] - shift);
        sx += row[j];
      }
      lse[r] = shift + std::log(s);
      int64_t t = target[r];
      row_loss[r] = t == a.ignore_index ? T(0) : cross_entropy_row_loss(lse[r], row[t], sx, a);
    }
  });
}

}  // namespace

void cross_entropy_forward_cpu(DType dtype, const void* logits, const int64_t* target,
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

void cross_entropy_backward_cpu(DType dtype, const void* logits, const int64_t* target,
                                const void* lse, const void* grad, bool per_row,
                                const void* divisor, const CrossEntropyArgs& a,
                                void* grad_logits) {
  visit_float_dtype(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *x = static_cast<const T*>(logits), *l = static_cast<const T*>(lse), *g = static_cast<const T*>(grad);
    T div = *static_cast<const T*>(divisor);
    T* out = static_cast<T*>(grad_logits);
    parallel_for(a.rows, kParallelGrain / (a.classes + 1) + 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = x + r * a.classes;
        T* dst = out + r * a.classes;
        int64_t t = target[r];
        if (t == a.ignore_index) {
          std::fill(dst, dst + a.classes, T(0));
          continue;
        }
        T scale = g[per_row ? r : 0] / div;
        for (int64_t j = 0; j < a.classes; ++j) dst[j] = cross_entropy_logit_grad(row[j], l[r], false, scale, a);
        dst[t] = cross_entropy_logit_grad(row[t], l[r], true, scale, a);
      }
    });
  });
}

}  // namespace fg
