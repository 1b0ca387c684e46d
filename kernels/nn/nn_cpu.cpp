#include "kernels/nn/nn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/functors.h"
#include "kernels/common/lanes.h"
#include "kernels/common/vec.h"
#include "kernels/common/workspace.h"
#include "flowgrad/base/errors.h"
#include "flowgrad/base/parallel.h"

namespace fg {
namespace {

// One contiguous row: y = softmax(x) or log_softmax(x). Separate passes keep each loop simple
// enough to vectorise (per instruction set: cpu_dispatch.h); the max and the sum keep 32 lanes
// (lanes.h) for the same reason: a plain running max compiles to a scalar chain.
template <class T>
FG_CPU_KERNEL void softmax_row(bool log, const T* __restrict x, int64_t r, T* __restrict y, T scale, int64_t valid) {
  // entries at or past `valid` are masked: they get probability 0 (log: -inf)
  constexpr int kLanes = 32;
  T lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<T>::infinity();
  int64_t k = 0;
  for (; k + kLanes <= valid; k += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      T v = x[k + j] * scale;
      lanes[j] = v > lanes[j] ? v : lanes[j];
    }
  T m = lane_max<kLanes>(lanes);
  for (; k < valid; ++k) m = x[k] * scale > m ? x[k] * scale : m;
  if (std::isinf(m) && m < 0) m = 0;  // an all -inf row gives NaN like NumPy, not a crash
  for (k = 0; k < valid; ++k) y[k] = fn::exp_nonpositive(x[k] * scale - m);
  for (k = valid; k < r; ++k) y[k] = T(0);
  for (int j = 0; j < kLanes; ++j) lanes[j] = T(0);
  for (k = 0; k + kLanes <= r; k += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += y[k + j];
  double sum = lane_total<kLanes>(lanes);
  for (; k < r; ++k) sum += y[k];
  if (log) {
    T lse = m + static_cast<T>(std::log(sum));
    for (int64_t i = 0; i < valid; ++i) y[i] = x[i] * scale - lse;
    for (int64_t i = valid; i < r; ++i) y[i] = -std::numeric_limits<T>::infinity();
  } else {
    T inv = static_cast<T>(1.0 / sum);
    for (int64_t i = 0; i < r; ++i) y[i] *= inv;
  }
}

// ---- layer_norm / rms_norm: one row at a time, each loop simple enough to vectorise ----

// sum of x (squared = false) or of (x - shift)^2 over a row: 32 partial sums in T (two vector
// registers of floats: a row is short, so each partial adds few terms), totalled pairwise
// (lanes.h) and then in double.
template <class T>
FG_CPU_KERNEL double row_sum(const T* __restrict x, int64_t n, double shift, bool squared) {
  constexpr int kLanes = 32;
  T partial[kLanes] = {};
  const T s = static_cast<T>(shift);
  int64_t k = 0;
  if (squared) {
    for (; k + kLanes <= n; k += kLanes)
      for (int j = 0; j < kLanes; ++j) partial[j] += (x[k + j] - s) * (x[k + j] - s);
  } else {
    for (; k + kLanes <= n; k += kLanes)
      for (int j = 0; j < kLanes; ++j) partial[j] += x[k + j];
  }
  double sum = lane_total<kLanes>(partial);
  for (; k < n; ++k) sum += squared ? (x[k] - shift) * (x[k] - shift) : static_cast<double>(x[k]);
  if (squared && std::isinf(sum)) {  // a square past T's range (|x| > 1.8e19 in float): again in double
    sum = 0;
    for (k = 0; k < n; ++k) sum += (static_cast<double>(x[k]) - shift) * (static_cast<double>(x[k]) - shift);
  }
  return sum;
}

// s = x + r over a row. (Summing s in the same loop measured slower inside the compiled step:
// 0.35 against 0.32 ms for its 8 add_layer_norms.)
template <class T>
FG_CPU_KERNEL void add_row(const T* __restrict x, const T* __restrict r, int64_t n, T* __restrict s) {
  for (int64_t j = 0; j < n; ++j) s[j] = x[j] + r[j];
}

// y = (x - m) * inv [* w] [+ b] over a row.
template <class T, bool kWeight, bool kBias>
FG_CPU_KERNEL void normalize_row(const T* __restrict x, const T* __restrict w, const T* __restrict b,
                                 int64_t n, T m, T inv, T* __restrict y) {
  for (int64_t j = 0; j < n; ++j) {
    T v = (x[j] - m) * inv;
    if constexpr (kWeight) v *= w[j];
    if constexpr (kBias) v += b[j];
    y[j] = v;
  }
}

// normalize_row at cpu_isa(), for a pointer chosen once per call.
template <class T, bool kWeight, bool kBias>
void normalize_row_at_isa(const T* x, const T* w, const T* b, int64_t n, T m, T inv, T* y) {
  FG_AT_ISA(normalize_row<T, kWeight, kBias>(x, w, b, n, m, inv, y));
}

// One row of norm_backward_cpu (nn.h): the row sums of gw and gw * xhat, dx, and the column
// sums of g * xhat and g added into part_w and part_b (cols); xhat is recomputed, never stored.
// One row sum per loop: GCC vectorises these loops but not a loop that fills two partial arrays.
template <class T, bool kWeight>
FG_CPU_KERNEL void norm_backward_row(const T* __restrict g, const T* __restrict x, const T* __restrict w,
                                     int64_t n, T mu, T inv, bool rms, const T* __restrict residual,
                                     T* __restrict dx, T* __restrict part_w, T* __restrict part_b) {
  constexpr int kLanes = 16;  // partial sums in T, one register of floats per sum
  T p_gw[kLanes] = {}, p_gwx[kLanes] = {};
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t k = 0; k < whole; k += kLanes)
    for (int j = 0; j < kLanes; ++j) p_gw[j] += kWeight ? g[k + j] * w[k + j] : g[k + j];
  for (int64_t k = 0; k < whole; k += kLanes)
    for (int j = 0; j < kLanes; ++j) p_gwx[j] += (kWeight ? g[k + j] * w[k + j] : g[k + j]) * ((x[k + j] - mu) * inv);
  double sum_gw = 0, sum_gwx = 0;
  for (int64_t k = whole; k < n; ++k) {
    T gw = kWeight ? g[k] * w[k] : g[k];
    sum_gw += gw;
    sum_gwx += static_cast<double>(gw) * ((x[k] - mu) * inv);
  }
  sum_gw += lane_total<kLanes>(p_gw);
  sum_gwx += lane_total<kLanes>(p_gwx);
  const T a = rms ? T(0) : T(sum_gw / static_cast<double>(n));
  const T c = T(sum_gwx / static_cast<double>(n));
  for (int64_t j = 0; j < n; ++j) {  // one pass over g and x: dx and both column partials
    const T h = (x[j] - mu) * inv;
    dx[j] = inv * ((kWeight ? g[j] * w[j] : g[j]) - a - h * c);
    part_w[j] += g[j] * h;
    part_b[j] += g[j];
  }
  if (residual)  // a loop of its own: dx is rounded before the add, as by a separate add op
    for (int64_t j = 0; j < n; ++j) dx[j] += residual[j];
}

// The weight and bias gradients' partial sums: kRowsInT rows added in T (as the sum op adds eight
// rows of a column), then into the double sums, so a row costs no conversions to double.
constexpr int64_t kRowsInT = 8;
constexpr int64_t kNormSlices = 8;  // row ranges with column sums of their own
constexpr int64_t kSliceRows = 32;  // the fewest rows worth a slice

template <class T>
FG_CPU_KERNEL void flush_partials(T* __restrict part, double* __restrict sum, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    sum[j] += static_cast<double>(part[j]);
    part[j] = T(0);
  }
}

// norm_backward_row at cpu_isa(), for a pointer chosen once per call.
template <class T, bool kWeight>
void norm_backward_row_at_isa(const T* g, const T* x, const T* w, int64_t n, T mu, T inv, bool rms, const T* residual,
                              T* dx, T* part_w, T* part_b) {
  FG_AT_ISA(norm_backward_row<T, kWeight>(g, x, w, n, mu, inv, rms, residual, dx, part_w, part_b));
}

}  // namespace

void softmax_cpu(const KernelEnv& env, DType dtype, bool log, const void* x, int64_t outer, int64_t r, int64_t inner,
                 void* y, double scale, int64_t causal_rows) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    parallel_for(outer * inner, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
      std::vector<T> line_in, line_out;
      for (int64_t line = begin; line < end; ++line) {
        int64_t base = (line / inner) * r * inner + line % inner;
        if (inner == 1) {
          int64_t valid = causal_rows > 0 ? std::min(r, line % causal_rows + 1) : r;
          FG_AT_ISA(softmax_row<T>(log, xs + base, r, ys + base, T(scale), valid));
          continue;
        }
        line_in.resize(r), line_out.resize(r);  // strided line: gather, compute, scatter
        for (int64_t k = 0; k < r; ++k) line_in[k] = xs[base + k * inner];
        FG_AT_ISA(softmax_row<T>(log, line_in.data(), r, line_out.data(), T(scale), r));
        for (int64_t k = 0; k < r; ++k) ys[base + k * inner] = line_out[k];
      }
    });
  });
}

void layer_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* w, const void* b, int64_t rows,
                    int64_t cols, double eps, void* y, void* mean, void* rstd) {
  add_layer_norm_cpu(env, dtype, x, nullptr, w, b, rows, cols, eps, nullptr, y, mean, rstd);
}

// r null: plain layer_norm (s unused).
void add_layer_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* r, const void* w, const void* b,
                        int64_t rows, int64_t cols, double eps, void* s, void* y, void* mean, void* rstd) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    const T* rs = static_cast<const T*>(r);
    const T* ws = static_cast<const T*>(w);
    const T* bs = static_cast<const T*>(b);
    auto* normalize = ws ? (bs ? normalize_row_at_isa<T, true, true> : normalize_row_at_isa<T, true, false>)
                         : (bs ? normalize_row_at_isa<T, false, true> : normalize_row_at_isa<T, false, false>);
    const double inv_cols = 1.0 / static_cast<double>(cols);  // a multiply: a row's chain waits on no divide
    parallel_for(rows, kParallelGrain / (cols + 1) + 1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        const T* row = xs + i * cols;
        if (rs) {  // the sum is normalised from the output it was written to, still in L1
          FG_AT_ISA(add_row(row, rs + i * cols, cols, static_cast<T*>(s) + i * cols));
          row = static_cast<T*>(s) + i * cols;
        }
        double mu = FG_AT_ISA(row_sum(row, cols, 0.0, false)) * inv_cols;
        double var = FG_AT_ISA(row_sum(row, cols, mu, true)) * inv_cols;
        T inv = static_cast<T>(1.0 / std::sqrt(var + eps));
        T m = static_cast<T>(mu);
        normalize(row, ws, bs, cols, m, inv, static_cast<T*>(y) + i * cols);
        static_cast<T*>(mean)[i] = m;
        static_cast<T*>(rstd)[i] = inv;
      }
    });
  });
}

void rms_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* w, int64_t rows, int64_t cols,
                  double eps, void* y, void* rstd) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    const T* ws = static_cast<const T*>(w);
    auto* normalize = ws ? normalize_row_at_isa<T, true, false> : normalize_row_at_isa<T, false, false>;
    parallel_for(rows, kParallelGrain / (cols + 1) + 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = xs + r * cols;
        double ss = FG_AT_ISA(row_sum(row, cols, 0.0, true));
        T inv = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(cols) + eps));
        normalize(row, ws, nullptr, cols, T(0), inv, static_cast<T*>(y) + r * cols);
        static_cast<T*>(rstd)[r] = inv;
      }
    });
  });
}

// Rows go to slices (their number fixed by the shape, so the sums do not depend on the thread
// count), each with its own column sums (2 x cols doubles, fed kRowsInT rows at a time from
// 2 x cols partials in T), added up once in slice order. Both live in the launch's workspace: a
// plan's scratch, no allocation. Norm rows cost about eight adds' work per element: the slices
// go to threads from kParallelGrain / 8 elements on (a (1024, 128) norm ran on one thread).
void norm_backward_cpu(const KernelEnv& env, DType dtype, bool rms, const void* g, const void* x, const void* w,
                       const void* mean, const void* rstd, const void* acc, int64_t rows, int64_t cols, void* dx,
                       void* dw, void* db) {
  visit_float_dtype(dtype, "norm backward", [&](auto tag) {
    using T = decltype(tag);
    const T* gs = static_cast<const T*>(g);
    const T* xs = static_cast<const T*>(x);
    const T* ws = static_cast<const T*>(w);
    const T* means = static_cast<const T*>(mean);
    const T* rstds = static_cast<const T*>(rstd);
    const T* accs = static_cast<const T*>(acc);
    auto* backward = ws ? norm_backward_row_at_isa<T, true> : norm_backward_row_at_isa<T, false>;
    const int64_t slices = std::clamp<int64_t>(rows / kSliceRows, 1, kNormSlices);
    CpuWorkspace space(env, static_cast<size_t>(slices * 2 * cols) * (sizeof(double) + sizeof(T)));
    double* sums = static_cast<double*>(space.data());               // (slices, [dw, db], cols)
    T* partials = reinterpret_cast<T*>(sums + slices * 2 * cols);  // the same, in T
    const bool large = rows * cols > kParallelGrain / 8;
    parallel_for(slices, large ? 1 : slices, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        double* sum = sums + s * 2 * cols;
        T* partial = partials + s * 2 * cols;
        std::fill(sum, sum + 2 * cols, 0.0);
        std::fill(partial, partial + 2 * cols, T(0));
        const int64_t first = rows * s / slices, end = rows * (s + 1) / slices;
        for (int64_t r = first; r < end; ++r) {
          int64_t at = r * cols;
          backward(gs + at, xs + at, ws, cols, rms ? T(0) : means[r], rstds[r], rms, accs ? accs + at : nullptr,
                   static_cast<T*>(dx) + at, partial, partial + cols);
          if ((r - first) % kRowsInT == kRowsInT - 1 || r == end - 1) FG_AT_ISA(flush_partials(partial, sum, 2 * cols));
        }
      }
    });
    for (int64_t j = 0; j < 2 * cols; ++j) {
      double v = 0;
      for (int64_t s = 0; s < slices; ++s) v += sums[s * 2 * cols + j];
      static_cast<T*>(j < cols ? dw : db)[j % cols] = static_cast<T>(v);
    }
  });
}


namespace {

constexpr int kBnLanes = 16;

// relu_backward over one plane: out = g where r > 0, else 0 (a plain select loop: it vectorises,
// where the select inside the lane sums below does not).
template <class T>
FG_CPU_KERNEL void plane_relu_grad(const T* __restrict g, const T* __restrict r, int64_t n, T* __restrict out) {
  for (int64_t k = 0; k < n; ++k) {
    const T gk = g[k], rk = r[k];  // both loaded whatever the mask: a select, not a branch
    out[k] = rk > T(0) ? gk : T(0);
  }
}

// Sum of (v[i] - shift) and, with `sq`, of its squares over one contiguous plane, in 16 lanes of T
// (independent adds, vectorised per level), the lanes' total added to the double sums.
template <class T>
FG_CPU_KERNEL void plane_moments(const T* __restrict v, int64_t n, T shift, bool sq, double& s1, double& s2) {
  T a[kBnLanes] = {}, b[kBnLanes] = {};
  int64_t k = 0;
  for (; k + kBnLanes <= n; k += kBnLanes)
    for (int j = 0; j < kBnLanes; ++j) {
      T d = v[k + j] - shift;
      a[j] += d;
      b[j] += d * d;
    }
  double t1 = lane_total<kBnLanes>(a), t2 = sq ? lane_total<kBnLanes>(b) : 0.0;
  for (; k < n; ++k) {
    double d = static_cast<double>(v[k] - shift);
    t1 += d, t2 += d * d;
  }
  s1 += t1, s2 += t2;
}

// Sum of g[i] and of g[i] * (x[i] - mean) over one plane.
template <class T>
FG_CPU_KERNEL void plane_grad_sums(const T* __restrict g, const T* __restrict x, int64_t n, T mean, double& sg,
                                   double& sgx) {
  T a[kBnLanes] = {}, b[kBnLanes] = {};
  int64_t k = 0;
  for (; k + kBnLanes <= n; k += kBnLanes)
    for (int j = 0; j < kBnLanes; ++j) {
      const T gk = g[k + j];
      a[j] += gk;
      b[j] += gk * (x[k + j] - mean);
    }
  double t1 = lane_total<kBnLanes>(a), t2 = lane_total<kBnLanes>(b);
  for (; k < n; ++k) {
    const T gk = g[k];
    t1 += gk, t2 += static_cast<double>(gk) * static_cast<double>(x[k] - mean);
  }
  sg += t1, sgx += t2;
}

// y = (x - m) * a + c over one plane (centred first: x * a + c' loses the digits of a large mean),
// with Relu the relu op's max(y, 0) (NaN kept).
template <bool Relu, class T>
FG_CPU_KERNEL void plane_affine(const T* __restrict x, int64_t n, T m, T a, T c, T* __restrict y) {
  for (int64_t k = 0; k < n; ++k) {
    T v = (x[k] - m) * a + c;
    y[k] = Relu ? (v > T(0) || v != v ? v : T(0)) : v;
  }
}

// dx = g * a + x * b + c over one plane (g may be dx itself: each element read before written).
template <class T>
FG_CPU_KERNEL void plane_grad(const T* g, const T* __restrict x, int64_t n, T a, T b, T c, T* dx) {
  for (int64_t k = 0; k < n; ++k) dx[k] = g[k] * a + x[k] * b + c;
}

}  // namespace

void batch_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* w, const void* b, int64_t n,
                    int64_t c, int64_t hw, double eps, bool relu, void* y, void* mean, void* var) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    const double count = static_cast<double>(n * hw);
    parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        // two passes over the channel's planes (a mean, then the squares about it: no cancellation)
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < n; ++i) FG_AT_ISA(plane_moments(xs + (i * c + ch) * hw, hw, T(0), false, s1, s2));
        const double m = count > 0 ? s1 / count : 0.0;
        s1 = s2 = 0;
        for (int64_t i = 0; i < n; ++i)
          FG_AT_ISA(plane_moments(xs + (i * c + ch) * hw, hw, static_cast<T>(m), true, s1, s2));
        // the sum of (x - m) is ~0 but not 0 where m rounds: the exact variance about the mean
        const double v = count > 0 ? std::max(0.0, s2 / count - (s1 / count) * (s1 / count)) : 0.0;
        const double mean_exact = m + (count > 0 ? s1 / count : 0.0);
        static_cast<T*>(mean)[ch] = static_cast<T>(mean_exact);
        static_cast<T*>(var)[ch] = static_cast<T>(v);
        const double scale = (w ? static_cast<double>(static_cast<const T*>(w)[ch]) : 1.0) / std::sqrt(v + eps);
        const double shift = b ? static_cast<double>(static_cast<const T*>(b)[ch]) : 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = (i * c + ch) * hw;
          T* out = static_cast<T*>(y) + at;
          if (relu) FG_AT_ISA(plane_affine<true>(xs + at, hw, T(mean_exact), T(scale), T(shift), out));
          else FG_AT_ISA(plane_affine<false>(xs + at, hw, T(mean_exact), T(scale), T(shift), out));
        }
      }
    });
  });
}

void batch_norm_backward_cpu(const KernelEnv& env, DType dtype, const void* g, const void* relu_out, const void* x,
                             const void* w, const void* mean, const void* var, int64_t n, int64_t c, int64_t hw,
                             double eps, void* dx, void* dw, void* db) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T *gs = static_cast<const T*>(g), *xs = static_cast<const T*>(x), *rs = static_cast<const T*>(relu_out);
    FG_ASSERT((!rs || dx) && "batch_norm_backward: the relu's masked gradient goes through dx");
    const double count = static_cast<double>(n * hw);
    parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        const T m = static_cast<const T*>(mean)[ch];
        double sg = 0, sgx = 0;  // sum g, sum g (x - mean)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = (i * c + ch) * hw;
          const T* gp = gs + at;
          if (rs) {  // the relu's mask first, into dx: the passes below read the masked gradient there
            FG_AT_ISA(plane_relu_grad(gs + at, rs + at, hw, static_cast<T*>(dx) + at));
            gp = static_cast<const T*>(dx) + at;
          }
          FG_AT_ISA(plane_grad_sums(gp, xs + at, hw, m, sg, sgx));
        }
        const double k = 1.0 / std::sqrt(static_cast<double>(static_cast<const T*>(var)[ch]) + eps);
        const double wc = w ? static_cast<double>(static_cast<const T*>(w)[ch]) : 1.0;
        if (dw) static_cast<T*>(dw)[ch] = static_cast<T>(sgx * k);
        if (db) static_cast<T*>(db)[ch] = static_cast<T>(sg);
        if (!dx) continue;
        // dx = w k (g - sg / count - (x - mean) k^2 sgx / count) = g a + x b + c
        const double a = wc * k, bx = count > 0 ? -wc * k * k * k * sgx / count : 0.0;
        const double cc = count > 0 ? -wc * k * sg / count - bx * static_cast<double>(m) : 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = (i * c + ch) * hw;
          T* out = static_cast<T*>(dx) + at;
          FG_AT_ISA(plane_grad(rs ? out : gs + at, xs + at, hw, T(a), T(bx), T(cc), out));
        }
      }
    });
  });
}

namespace {

// The even lanes 0, 2, .. and the odd lanes 1, 3, .. of the 2L values a, b (through references:
// a vector passed or returned by value changes the ABI of a function without the level's
// instructions, which -Wpsabi rejects).
template <class T, int W>
[[gnu::always_inline]] inline void even_odd(const Vec<T, W>& a, const Vec<T, W>& b, Vec<T, W>& even, Vec<T, W>& odd) {
  [&]<std::size_t... I>(std::index_sequence<I...>) __attribute__((always_inline)) {
    even = __builtin_shufflevector(a, b, (2 * I)...);
    odd = __builtin_shufflevector(a, b, (2 * I + 1)...);
  }(std::make_index_sequence<kLane<T, W>>{});
}

// One output row of 2x2 windows at stride 2 (the common pool) from input rows r0 and r0 + w: the
// rule of the loop in max_pool2d_cpu (the first maximum in row order, the first NaN kept) as
// selects over whole vectors, the windows' corners split into even and odd columns; then each
// window's winner (0-3) made an index. bench_cnn_rnn's CNN pool (64, 32, 32, 32) on one thread:
// 3.4-3.5 ms by that loop at every level, 1.0-1.2 ms by this one (2026-12-07, a 2-core Xeon). At
// avx512 it runs on 32-byte vectors: GCC 12's 64-byte code of it took 4.2 ms. `corner`: r0's
// offset in the plane.
template <class T, int W>
FG_CPU_KERNEL void pool_row_2x2(const T* __restrict r0, int64_t w, int64_t out_w, int64_t corner, T* __restrict out,
                                int64_t* __restrict at) {
  using V = Vec<T, W>;
  using U = typename VecOf<T, W>::unaligned;
  using I = typename VecOf<T, W>::index;
  using Lane = typename VecOf<T, W>::lane_index;
  constexpr int64_t L = kLane<T, W>;
  const T* __restrict r1 = r0 + w;
  Lane winner[L];
  int64_t x = 0;
  for (; x + L <= out_w; x += L) {
    const V a0 = *reinterpret_cast<const U*>(r0 + 2 * x), a1 = *reinterpret_cast<const U*>(r0 + 2 * x + L);
    const V b0 = *reinterpret_cast<const U*>(r1 + 2 * x), b1 = *reinterpret_cast<const U*>(r1 + 2 * x + L);
    V best, next[3];
    even_odd<T, W>(a0, a1, best, next[0]);
    even_odd<T, W>(b0, b1, next[1], next[2]);
    I code = I{};
    for (int i = 0; i < 3; ++i) {  // selects as bit masks: GCC 12 made lane-by-lane code of ?: at avx512
      const I take = ~(next[i] <= best) & (best == best);
      best = reinterpret_cast<V>((take & reinterpret_cast<I>(next[i])) | (~take & reinterpret_cast<I>(best)));
      code = (take & (i + 1)) | (~take & code);
    }
    *reinterpret_cast<U*>(out + x) = best;
    std::memcpy(winner, &code, sizeof code);
    for (int64_t l = 0; l < L; ++l)
      at[x + l] = corner + 2 * (x + l) + (winner[l] & 1) + (winner[l] >> 1) * w;
  }
  for (; x < out_w; ++x) {  // the last windows, one by one
    T best = r0[2 * x];
    int64_t pos = 0;
    const T v[3] = {r0[2 * x + 1], r1[2 * x], r1[2 * x + 1]};
    for (int i = 0; i < 3; ++i)
      if (!(v[i] <= best) && best == best) best = v[i], pos = i + 1;
    out[x] = best;
    at[x] = corner + 2 * x + (pos & 1) + (pos >> 1) * w;
  }
}

}  // namespace

void max_pool2d_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* y,
                    int64_t* index) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const int64_t L = g.out_h * g.out_w;
    const bool two = g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2;
    parallel_for(g.n * g.c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) {
        const T* img = static_cast<const T*>(x) + plane * g.h * g.w;
        T* out = static_cast<T*>(y) + plane * L;
        int64_t* at = index + plane * L;
        if (two) {
          for (int64_t oy = 0; oy < g.out_h; ++oy)
            switch (isa_vector_bytes()) {
              case 64: FG_AT_WIDTH(64, (pool_row_2x2<T, 32>(img + 2 * oy * g.w, g.w, g.out_w, 2 * oy * g.w,
                                                             out + oy * g.out_w, at + oy * g.out_w))); break;
              case 32: FG_AT_WIDTH(32, (pool_row_2x2<T, 32>(img + 2 * oy * g.w, g.w, g.out_w, 2 * oy * g.w,
                                                             out + oy * g.out_w, at + oy * g.out_w))); break;
              default: FG_AT_WIDTH(16, (pool_row_2x2<T, 16>(img + 2 * oy * g.w, g.w, g.out_w, 2 * oy * g.w,
                                                             out + oy * g.out_w, at + oy * g.out_w)));
            }
          continue;
        }
        for (int64_t oy = 0; oy < g.out_h; ++oy)
          for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const int64_t corner = oy * g.stride_h * g.w + ox * g.stride_w;
            int64_t best_at = corner;
            T best = img[corner];
            for (int64_t i = 0; i < g.kh; ++i) {
              const int64_t row = corner + i * g.w;
              for (int64_t j = 0; j < g.kw; ++j) {
                const T v = img[row + j];
                // a larger value, or the first NaN (then kept: best != best stops every later change)
                if (!(v <= best) && best == best) best = v, best_at = row + j;
              }
            }
            out[oy * g.out_w + ox] = best;
            at[oy * g.out_w + ox] = best_at;
          }
      }
    });
  });
}

void max_pool2d_backward_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* grad,
                             const int64_t* index, void* dx) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const int64_t L = g.out_h * g.out_w;
    parallel_for(g.n * g.c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) {
        T* img = static_cast<T*>(dx) + plane * g.h * g.w;
        const T* gs = static_cast<const T*>(grad) + plane * L;
        const int64_t* at = index + plane * L;
        std::fill(img, img + g.h * g.w, T(0));
        for (int64_t k = 0; k < L; ++k) img[at[k]] += gs[k];
      }
    });
  });
}

}  // namespace fg
