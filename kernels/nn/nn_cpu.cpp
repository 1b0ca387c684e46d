#include "kernels/nn/nn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/functors.h"
#include "kernels/common/lanes.h"
#include "kernels/common/vec.h"
#include "kernels/common/workspace.h"
#include "kernels/linalg/gemm.h"
#include "kernels/linalg/packed_gemm.h"
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
  for (k = 0; k < valid; ++k) y[k] = fn::exp_any(x[k] * scale - m);
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

// The output columns ox whose input column ox * stride - pad + k lies inside [0, w): [lo, hi).
// Outside it a column reads padding; inside, the loops below run without a bounds test (for
// stride 1 a row is one contiguous copy or add).
struct InsideColumns {
  int64_t lo, hi;
  InsideColumns(int64_t out_w, int64_t w, int64_t stride, int64_t pad, int64_t k) {
    int64_t first = pad - k, last = w - 1 + pad - k;  // ox * stride must lie in [first, last]
    hi = last < 0 ? 0 : std::min(out_w, last / stride + 1);
    lo = std::min(hi, first <= 0 ? int64_t{0} : (first + stride - 1) / stride);
  }
};

template <class T>
void accumulate_row(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// One plane (H, W) of an image -> its kh*kw rows of columns (each out_h*out_w), zero padding.
template <class T>
void im2col_plane(const Conv2dGeometry& g, const T* img, T* out_rows) {
  const int64_t L = g.out_h * g.out_w;
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      T* out = out_rows + (ki * g.kw + kj) * L;
      const InsideColumns in(g.out_w, g.w, g.stride_w, g.pad_w, kj);
      for (int64_t oy = 0; oy < g.out_h; ++oy) {
        T* row = out + oy * g.out_w;
        int64_t iy = oy * g.stride_h - g.pad_h + ki;
        if (iy < 0 || iy >= g.h) {
          std::fill(row, row + g.out_w, T(0));
          continue;
        }
        std::fill(row, row + in.lo, T(0));
        const T* src = img + iy * g.w + in.lo * g.stride_w - g.pad_w + kj;
        if (g.stride_w == 1) std::copy(src, src + (in.hi - in.lo), row + in.lo);
        else
          for (int64_t ox = in.lo; ox < in.hi; ++ox) row[ox] = src[(ox - in.lo) * g.stride_w];
        std::fill(row + in.hi, row + g.out_w, T(0));
      }
    }
}

// The adjoint of im2col_plane: the plane's kh*kw rows of columns summed into img (overwritten).
template <class T>
void col2im_plane(const Conv2dGeometry& g, const T* in_rows, T* img) {
  const int64_t L = g.out_h * g.out_w;
  std::memset(img, 0, sizeof(T) * g.h * g.w);
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const T* in = in_rows + (ki * g.kw + kj) * L;
      const InsideColumns inside(g.out_w, g.w, g.stride_w, g.pad_w, kj);
      for (int64_t oy = 0; oy < g.out_h; ++oy) {
        int64_t iy = oy * g.stride_h - g.pad_h + ki;
        if (iy < 0 || iy >= g.h) continue;
        const T* src = in + oy * g.out_w + inside.lo;
        T* dst = img + iy * g.w + inside.lo * g.stride_w - g.pad_w + kj;
        if (g.stride_w == 1) accumulate_row(dst, src, inside.hi - inside.lo);
        else
          for (int64_t ox = inside.lo; ox < inside.hi; ++ox) dst[(ox - inside.lo) * g.stride_w] += src[ox - inside.lo];
      }
    }
}

// Whether the convolution reads each pixel once, in place (1x1 kernel, stride 1, no padding): an
// image (C, H, W) is then its own columns (C, H*W) and no im2col is needed.
bool pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// The columns (C*kh*kw, L) of image n: the image itself for a pointwise convolution, else
// im2col of it into `cols`.
template <class T>
const T* image_columns(const Conv2dGeometry& g, const T* x, int64_t n, T* cols) {
  const T* img = x + n * g.c * g.h * g.w;
  if (pointwise(g)) return img;
  for (int64_t plane = 0; plane < g.c; ++plane)
    im2col_plane(g, img + plane * g.h * g.w, cols + plane * g.kh * g.kw * g.out_h * g.out_w);
  return cols;
}

template <class F>
void visit_conv_dtype(DType dtype, F&& f) {
  if (dtype == DType::Float32) f(float{});
  else if (dtype == DType::Float64) f(double{});
  else FG_ASSERT(false && "conv2d: its shape rule admits float32 and float64 only");
}

// The images in `chunks` runs: one run per pool thread where there are at least as many images
// as threads, each with its own columns and the BLAS single-threaded inside it; else one run
// whose products are threaded. A convolution's products per image are small (16-32 output
// channels by 1024 pixels in bench_cnn_rnn's CNN), and a threaded GEMM per image spent more on
// waking and joining threads than it saved: that CNN's step took 206 ms on 2 threads against
// 101 ms on 1 (avx512), 5 GEMMs per image and layer each waiting on the pool.
int image_chunks(const Conv2dGeometry& g) {
  const int threads = in_parallel_region() ? 1 : pool_threads();
  return g.n >= threads ? threads : 1;
}
template <class Run>  // run(chunk) for chunk in [0, chunks)
void over_chunks(int chunks, Run&& run) {
  if (chunks == 1) return run(0);
  SingleThreadedBlas single;
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) run(static_cast<int>(c));
  });
}

// body(cols, CK, L, n0, n1): images [n0, n1) with a typed workspace for one image's columns (CK =
// C*kh*kw rows of L = out_h*out_w; none for a pointwise convolution), run by over_chunks.
template <class Body>
void over_images(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, Body&& body) {
  visit_conv_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t CK = g.c * g.kh * g.kw, L = g.out_h * g.out_w, per = pointwise(g) ? 0 : CK * L;
    const int chunks = image_chunks(g);
    CpuWorkspace ws(env, sizeof(T) * per * chunks);
    T* cols = static_cast<T*>(ws.data());
    over_chunks(chunks, [&](int c) { body(cols + c * per, CK, L, g.n * c / chunks, g.n * (c + 1) / chunks); });
  });
}

// Whether a convolution's products run on packed panels (packed_gemm.h) rather than the GEMM: at
// avx2 and avx512 with stride 1. With fewer images than threads an image's product (and, from the
// padded image, its packing) spreads its panels or rows over the threads; every value is summed in
// the same order whatever the split, so the bits do not depend on the thread count. Stride 2 was
// slower packed (a 32 -> 64 channel 32x32 layer, 64 images, 2 threads, avx512: forward 4.3-4.9 ->
// 5.0-5.1 ms, weight gradient +1.5 ms), so it keeps the GEMM.
bool packed_products(const Conv2dGeometry& g) {
  return isa_vector_bytes() >= 32 && g.stride_h == 1 && g.stride_w == 1;
}

// Units of a packed product (panels or rows, `work` multiply-adds each) per thread: below 2^18
// multiply-adds a share is not worth waking a thread. Inside a parallel region (an image chunk per
// thread) parallel_for runs on the calling thread anyway.
int64_t product_grain(int64_t work) { return std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, work)); }

// The image padded once (zeros around it, `padded`: C x (H + 2 pad_h) x (W + 2 pad_w)), so that
// every row of every panel of its columns (stride 1) is copied from it, one run per output row the
// panel's pixels touch, no bounds tests, each panel written in order. bench_cnn_rnn's 32-channel
// layer, one image on one thread (the conv2d_cpu call alone): 213-221 -> 186 us at avx512, 275 ->
// 256 at avx2 against im2col rows packed a few at a time (2026-12-07, a 2-core Xeon).
template <class T>
void pad_image(const Conv2dGeometry& g, const T* img, T* padded) {
  const int64_t hp = g.h + 2 * g.pad_h, wp = g.w + 2 * g.pad_w;
  std::fill(padded, padded + g.c * hp * wp, T(0));
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t iy = 0; iy < g.h; ++iy)
      std::copy_n(img + (c * g.h + iy) * g.w, g.w, padded + (c * hp + iy + g.pad_h) * wp + g.pad_w);
}

// Panels [p0, p1) of an image's columns from its padded image.
template <int P, class T>
void columns_from_padded(const Conv2dGeometry& g, const T* padded, const PackedB<T>& cols, int64_t p0, int64_t p1) {
  const int64_t hp = g.h + 2 * g.pad_h, wp = g.w + 2 * g.pad_w, L = g.out_h * g.out_w;
  for (int64_t p = p0; p < p1; ++p) {
    T* dst = cols.panels + p * cols.K * P;
    const int64_t j0 = p * P, n = std::min<int64_t>(P, L - j0), oy = j0 / g.out_w, ox = j0 % g.out_w;
    const bool one_run = n == P && ox + P <= g.out_w;  // a copy of constant size
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj, dst += P) {
          if (one_run) {
            std::memcpy(dst, padded + (c * hp + oy + ki) * wp + ox + kj, P * sizeof(T));
            continue;
          }
          for (int64_t j = j0; j < j0 + n;) {  // runs within output rows, then the missing columns
            const int64_t y = j / g.out_w, x = j % g.out_w, run = std::min(j0 + n - j, g.out_w - x);
            std::memcpy(dst + (j - j0), padded + (c * hp + y + ki) * wp + x + kj, run * sizeof(T));
            j += run;
          }
          std::fill(dst + n, dst + P, T(0));
        }
  }
}
template <class T>
void columns_from_padded(const Conv2dGeometry& g, const T* padded, const PackedB<T>& cols, int64_t p0, int64_t p1) {
  switch (cols.width) {
    case 8: return columns_from_padded<8>(g, padded, cols, p0, p1);
    case 16: return columns_from_padded<16>(g, padded, cols, p0, p1);
    default: return columns_from_padded<32>(g, padded, cols, p0, p1);
  }
}

// conv2d_cpu at generic: im2col into a workspace, then the GEMM.
void conv2d_gemm(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                 const void* w, const void* b, void* y) {
  over_images(env, dtype, g, [&](auto* cols, int64_t CK, int64_t L, int64_t n0, int64_t n1) {
    using T = std::remove_pointer_t<decltype(cols)>;
    const T* bias = static_cast<const T*>(b);
    for (int64_t n = n0; n < n1; ++n) {
      const T* B = image_columns(g, static_cast<const T*>(x), n, cols);
      T* Y = static_cast<T*>(y) + n * out_ch * L;
      if (!bias) {
        gemm_cpu(env, dtype, false, false, out_ch, L, CK, w, CK, B, L, Y, L);
        continue;
      }
      for (int64_t o = 0; o < out_ch; ++o) std::fill(Y + o * L, Y + (o + 1) * L, bias[o]);
      gemm_accumulate_cpu(env, dtype, false, false, out_ch, L, CK, w, CK, B, L, Y, L);
    }
  });
}

}  // namespace

void im2col_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* cols) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* cs = static_cast<T*>(cols);
    const int64_t L = g.out_h * g.out_w;
    parallel_for(g.n * g.c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) im2col_plane(g, xs + plane * g.h * g.w, cs + plane * g.kh * g.kw * L);
    });
  });
}

void col2im_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* cols, void* x) {
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* cs = static_cast<const T*>(cols);
    T* xs = static_cast<T*>(x);
    const int64_t L = g.out_h * g.out_w;
    parallel_for(g.n * g.c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) col2im_plane(g, cs + plane * g.kh * g.kw * L, xs + plane * g.h * g.w);
    });
  });
}

// Image by image, one image's columns at a time in a workspace (C*kh*kw x L, cache-sized for
// small images) instead of all N images' columns in memory: y[n] (O, L) = W (O, CK) @ cols[n] + b.
// At avx2 and avx512 with stride 1 (packed_products) the columns go straight into the panels of a
// product with W (packed_gemm.h), copied from the padded image, where a GEMM would pack them again
// after im2col wrote them. bench_cnn_rnn's 32-channel layer (64 images, one thread, step.profile):
// 19.9-20.5 -> 15.6-15.9 ms at avx512, 19.9-21.1 -> 19.3-20.1 at avx2 with the columns first
// packed row by row (2026-12-07, a 2-core Xeon); copying them from the padded image took more off
// (pad_image).
void conv2d_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                const void* w, const void* b, void* y) {
  if (!packed_products(g)) return conv2d_gemm(env, dtype, g, out_ch, x, w, b, y);
  visit_conv_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t CK = g.c * g.kh * g.kw, L = g.out_h * g.out_w, panels = packed_size<T>(CK, L);
    const bool padded = !pointwise(g);
    const int64_t before = padded ? g.c * (g.h + 2 * g.pad_h) * (g.w + 2 * g.pad_w) : 0;  // the padded image
    const int64_t per = before + panels;
    const int chunks = image_chunks(g);
    CpuWorkspace ws(env, sizeof(T) * per * chunks);
    const T* bias = static_cast<const T*>(b);
    over_chunks(chunks, [&](int c) {
      T* block = static_cast<T*>(ws.data()) + c * per;
      const PackedB<T> cols = packed_layout<T>(CK, L, 1, block + before);
      const RowsA<T> weights = prepare_a(cols, out_ch, static_cast<const T*>(w), CK);
      for (int64_t n = g.n * c / chunks; n < g.n * (c + 1) / chunks; ++n) {
        const T* img = static_cast<const T*>(x) + n * g.c * g.h * g.w;
        if (padded) pad_image(g, img, block);
        else pack_rows(cols, 0, CK, img, L);  // a pointwise convolution's image is its columns
        T* Y = static_cast<T*>(y) + n * out_ch * L;
        if (bias)
          for (int64_t o = 0; o < out_ch; ++o) std::fill(Y + o * L, Y + (o + 1) * L, bias[o]);
        parallel_for(cols.group_panels(), product_grain(out_ch * CK * cols.width), [&](int64_t p0, int64_t p1) {
          if (padded) columns_from_padded(g, block, cols, p0, p1);
          packed_gemm(cols, weights, static_cast<const T*>(nullptr), bias ? Store::Accumulate : Store::Overwrite, Y,
                      L, p0, p1);
        });
      }
    });
  });
}

// dx[n] = col2im(W^T (CK, O) @ dy[n] (O, L)); a pointwise convolution's product is dx[n] itself.
void conv2d_input_grad_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch,
                           const void* dy, const void* w, void* dx) {
  over_images(env, dtype, g, [&](auto* cols, int64_t CK, int64_t L, int64_t n0, int64_t n1) {
    using T = std::remove_pointer_t<decltype(cols)>;
    const bool direct = pointwise(g);
    for (int64_t n = n0; n < n1; ++n) {
      T* img = static_cast<T*>(dx) + n * g.c * g.h * g.w;
      const T* G = static_cast<const T*>(dy) + n * out_ch * L;
      gemm_cpu(env, dtype, true, false, CK, L, out_ch, w, CK, G, L, direct ? img : cols, L);
      if (!direct)
        for (int64_t plane = 0; plane < g.c; ++plane)
          col2im_plane(g, cols + plane * g.kh * g.kw * L, img + plane * g.h * g.w);
    }
  });
}

// dw (O, CK) = sum over n of dy[n] (O, L) @ cols[n]^T, accumulated image by image; with several
// chunks each sums its images into its own partial, and the partials are added in chunk order
// (the same bits for a given thread count). At avx2 and avx512 the product is dw^T (CK, O) +=
// cols[n] (CK, L) @ dy[n]^T on packed panels (packed_gemm.h): the columns are read as they are,
// row by row, and only dy[n] (O, L) is packed, where a GEMM packs both, the columns (CK x L) for
// every image. bench_cnn_rnn's 32-channel layer (64 images, one thread, step.profile): 16.7-17.1
// -> 13.1-13.6 ms at avx512, 22.6-23.5 -> 16.6-17.1 at avx2 (2026-12-07, a 2-core Xeon). The GEMM
// stays where packed_products says so (generic: A's values would first be spread over vectors,
// which costs more than it saves; strides other than 1), and for fewer output channels than a
// panel's columns (16 at avx512: half of each product's lanes idle).
void conv2d_weight_grad_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch,
                            const void* x, const void* dy, void* dw) {
  visit_conv_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t CK = g.c * g.kh * g.kw, L = g.out_h * g.out_w, per = pointwise(g) ? 0 : CK * L;
    const int64_t size = out_ch * CK;
    const int chunks = image_chunks(g);
    const bool packed = packed_products(g) && out_ch >= panel_width<T>(), partial = chunks > 1 || packed;
    const int64_t panels = packed ? packed_size<T>(L, out_ch) : 0;
    CpuWorkspace ws(env, sizeof(T) * (per + panels + (partial ? size : 0)) * chunks);
    T* cols = static_cast<T*>(ws.data());
    T* packs = cols + per * chunks;
    T* partials = packs + panels * chunks;
    T* out = static_cast<T*>(dw);
    over_chunks(chunks, [&](int c) {
      T* sum = partial ? partials + c * size : out;
      const int64_t n0 = g.n * c / chunks, n1 = g.n * (c + 1) / chunks;
      if (n0 == n1) std::fill(sum, sum + size, T(0));
      for (int64_t n = n0; n < n1; ++n) {
        const T* B = image_columns(g, static_cast<const T*>(x), n, cols + c * per);
        const T* G = static_cast<const T*>(dy) + n * out_ch * L;
        if (!packed) {
          (n == n0 ? gemm_cpu : gemm_accumulate_cpu)(env, dtype, false, true, out_ch, CK, L, G, L, B, L, sum, CK);
          continue;
        }
        const PackedB<T> b = pack_b(true, L, out_ch, G, L, 1, packs + c * panels);
        parallel_for(CK, product_grain(out_ch * L), [&](int64_t i0, int64_t i1) {  // rows of dw^T
          packed_gemm(b, prepare_a(b, i1 - i0, B + i0 * L, L), static_cast<const T*>(nullptr),
                      n == n0 ? Store::Overwrite : Store::Accumulate, sum + i0 * out_ch, out_ch, 0, b.group_panels());
        });
      }
    });
    if (!partial) return;
    for (int64_t o = 0; o < out_ch; ++o)
      for (int64_t k = 0; k < CK; ++k) {
        const int64_t at = packed ? k * out_ch + o : o * CK + k;  // packed partials are dw^T
        T total = partials[at];
        for (int c = 1; c < chunks; ++c) total += partials[c * size + at];
        out[o * CK + k] = total;
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
  visit_conv_dtype(dtype, [&](auto tag) {
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
  visit_conv_dtype(dtype, [&](auto tag) {
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

void max_pool2d_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* y,
                    int64_t* index) {
  visit_conv_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t L = g.out_h * g.out_w;
    parallel_for(g.n * g.c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) {
        const T* img = static_cast<const T*>(x) + plane * g.h * g.w;
        T* out = static_cast<T*>(y) + plane * L;
        int64_t* at = index + plane * L;
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
  visit_conv_dtype(dtype, [&](auto tag) {
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
