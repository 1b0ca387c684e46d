#include "kernels/reduce/reduce.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "kernels/reduce/reduce_line.h"

namespace fg {
namespace {

// Sum/Mean over a leading axis (inner > 1): accumulate whole rows, which vectorises.
template <class T, class Out>
void sum_columns(bool mean, const T* x, int64_t outer, int64_t r, int64_t inner, Out* out) {
  parallel_for(outer * inner, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
    std::vector<reduce::Acc<T>> acc;
    for (int64_t line = begin; line < end;) {
      int64_t o = line / inner, j0 = line % inner;
      int64_t j1 = std::min(inner, j0 + (end - line));
      acc.assign(j1 - j0, 0);
      const T* base = x + o * r * inner;
      for (int64_t k = 0; k < r; ++k) {
        const T* row = base + k * inner;
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<reduce::Acc<T>>(row[j]);
      }
      for (int64_t j = j0; j < j1; ++j) {
        double v = static_cast<double>(acc[j - j0]);
        out[o * inner + j] = mean ? static_cast<Out>(v / static_cast<double>(r)) : static_cast<Out>(acc[j - j0]);
      }
      line += j1 - j0;
    }
  });
}

}  // namespace

void reduce_cpu(ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t outer,
                int64_t r, int64_t inner, void* out, double correction) {
  visit_compute_dtype(in_dtype, "reduce", [&](auto in_tag) {
    visit_compute_dtype(out_dtype, "reduce", [&](auto out_tag) {
      using T = decltype(in_tag);
      using Out = decltype(out_tag);
      const T* xs = static_cast<const T*>(x);
      Out* ys = static_cast<Out*>(out);
      if ((fn == ReduceFn::Sum || fn == ReduceFn::Mean) && inner > 1) {
        sum_columns<T, Out>(fn == ReduceFn::Mean, xs, outer, r, inner, ys);
        return;
      }
      parallel_for(outer * inner, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) {
          int64_t o = line / inner, j = line % inner;
          ys[line] = reduce::reduce_line<T, Out>(fn, xs + o * r * inner + j, r, inner, correction);
        }
      });
    });
  });
}

}  // namespace fg
