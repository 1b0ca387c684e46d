// One output element of a reduction, written once for the CPU and CUDA kernels: the line
// x[0], x[stride], ..., x[(r-1)*stride]. Float sums accumulate in double; the first NaN wins
// Max/Min/Arg* as in NumPy; Var divides by max(0, r - correction).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "flowgrad/base/fg_hd.h"
#include "kernels/reduce/reduce.h"

namespace fg::reduce {

using std::exp;
using std::log;

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
FG_HD bool nan_of(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

// Var's divisor max(0, r - correction), as NumPy and PyTorch: no elements left gives NaN (or
// Inf), never a negative variance.
FG_HD double var_divisor(int64_t r, double correction) {
  double n = static_cast<double>(r) - correction;
  return n > 0 ? n : 0.0;
}

// The running sums of the line x[0], x[stride], ..., x[(r-1)*stride] into y's same places. Out: T
// for floats, int64 otherwise. Integer lines add in order (exact in any order). Float lines add in
// double in chunks of kCumsumChunk, so that a long line is scanned in parallel (review G6): y[k] is
// T(carry + local), local the in-order sum of k's chunk up to k and carry the in-order sum of the
// totals of the chunks before it. The CPU and CUDA use this one order and give the same bits; a
// line of at most one chunk is the plain running sum (carry 0).
template <class T>
using CumOut = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
constexpr int64_t kCumsumChunk = 1024;
template <class T>
FG_HD void cumsum_chunk(const T* x, CumOut<T>* y, int64_t n, int64_t stride, Acc<T> carry = 0) {
  Acc<T> acc = 0;
  for (int64_t k = 0; k < n; ++k) {
    acc += static_cast<Acc<T>>(x[k * stride]);
    y[k * stride] = static_cast<CumOut<T>>(carry + acc);
  }
}
// A chunk's total, in the order cumsum_chunk adds it.
template <class T>
FG_HD Acc<T> chunk_total(const T* x, int64_t n, int64_t stride) {
  Acc<T> acc = 0;
  for (int64_t k = 0; k < n; ++k) acc += static_cast<Acc<T>>(x[k * stride]);
  return acc;
}
// Chunks of a line of r elements (floats), and the in-order exclusive scan of their totals.
FG_HD int64_t cumsum_chunks(int64_t r) { return (r + kCumsumChunk - 1) / kCumsumChunk; }
FG_HD void carries_of(double* totals, int64_t chunks) {
  double carry = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    double total = totals[c];
    totals[c] = carry;
    carry += total;
  }
}

// One output element: the line x[0], x[stride], ..., x[(r-1)*stride].
template <class T, class Out>
FG_HD Out reduce_line(ReduceFn fn, const T* x, int64_t r, int64_t stride, double correction) {
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
      return static_cast<Out>(ss / var_divisor(r, correction));
    }
    case ReduceFn::LogSumExp: {
      double m = -INFINITY;
      for (int64_t k = 0; k < r; ++k) m = (static_cast<double>(x[k * stride]) > m ? static_cast<double>(x[k * stride]) : m);
      if (m == INFINITY || m == -INFINITY || m != m) return static_cast<Out>(r == 0 ? -INFINITY : m);
      double s = 0;
      for (int64_t k = 0; k < r; ++k) s += exp(static_cast<double>(x[k * stride]) - m);
      return static_cast<Out>(m + log(s));
    }
  }
  return Out{};
}

}  // namespace fg::reduce
