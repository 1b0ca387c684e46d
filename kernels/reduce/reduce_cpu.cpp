#include "kernels/reduce/reduce.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/parallel.h"

namespace fg {
namespace {

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
bool nan_of(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// One output element: the line x[0], x[stride], ..., x[(r-1)*stride].
template <class T, class Out>
Out reduce_line(ReduceFn fn, const T* x, int64_t r, int64_t stride, double correction) {
  switch (fn) {
    case ReduceFn::Sum:
    case ReduceFn::Mean: {
      Acc<T> acc = 0;
      for (int64_t k = 0; k < r; ++k) acc += static_cast<Acc<T>>(x[k * stride]);
      if (fn == ReduceFn::Mean) return static_cast<Out>(static_cast<double>(acc) / static_cast<double>(r));
      return static_cast<Out>(acc);
    }
    case ReduceFn::Max:
    case ReduceFn::Min:
    case ReduceFn::ArgMax:
    case ReduceFn::ArgMin: {
      bool want_max = fn == ReduceFn::Max || fn == ReduceFn::ArgMax;
      T best = x[0];
      int64_t at = 0;
      for (int64_t k = 1; k < r && !nan_of(best); ++k) {  // the first NaN wins, as in NumPy
        T v = x[k * stride];
        if (nan_of(v) || (want_max ? v > best : v < best)) {
          best = v;
          at = k;
        }
      }
      if (fn == ReduceFn::ArgMax || fn == ReduceFn::ArgMin) return static_cast<Out>(at);
      return static_cast<Out>(best);
    }
    case ReduceFn::Var: {
      double mean = 0;
      for (int64_t k = 0; k < r; ++k) mean += static_cast<double>(x[k * stride]);
      mean /= static_cast<double>(r);
      double ss = 0;
      for (int64_t k = 0; k < r; ++k) {
        double d = static_cast<double>(x[k * stride]) - mean;
        ss += d * d;
      }
      return static_cast<Out>(ss / (static_cast<double>(r) - correction));
    }
    case ReduceFn::LogSumExp: {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < r; ++k) m = std::max(m, static_cast<double>(x[k * stride]));
      if (!std::isfinite(m)) return static_cast<Out>(r == 0 ? -INFINITY : m);
      double s = 0;
      for (int64_t k = 0; k < r; ++k) s += std::exp(static_cast<double>(x[k * stride]) - m);
      return static_cast<Out>(m + std::log(s));
    }
  }
  return Out{};
}

// Sum/Mean over a leading axis (inner > 1): accumulate whole rows, which vectorises.
template <class T, class Out>
void sum_columns(bool mean, const T* x, int64_t outer, int64_t r, int64_t inner, Out* out) {
  parallel_for(outer * inner, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
    std::vector<Acc<T>> acc;
    for (int64_t line = begin; line < end;) {
      int64_t o = line / inner, j0 = line % inner;
      int64_t j1 = std::min(inner, j0 + (end - line));
      acc.assign(j1 - j0, 0);
      const T* base = x + o * r * inner;
      for (int64_t k = 0; k < r; ++k) {
        const T* row = base + k * inner;
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<Acc<T>>(row[j]);
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
          ys[line] = reduce_line<T, Out>(fn, xs + o * r * inner + j, r, inner, correction);
        }
      });
    });
  });
}

}  // namespace fg
