// CUDA nn kernels with the CPU kernels' semantics. softmax / log_softmax (scale, causal rows,
// an all -inf row gives NaN, masked entries 0 or -inf): rows along the last dim take one block
// per row, strided lines one thread per line. layer_norm / rms_norm and their first-order
// backward: one block per row, statistics in double.
#include "kernels/common/launch.cuh"
#include "kernels/common/block_reduce.cuh"
#include "kernels/common/functors.h"
#include "kernels/nn/nn.h"

namespace fg {
namespace {

constexpr int kBlock = kThreads;  // block-per-line kernels: a power of two for block_combine

template <class T>
__device__ T write_value(bool log, T v, T m, double sum) {
  return log ? v - (m + static_cast<T>(::log(sum))) : static_cast<T>(fn::exp_any(v - m) / sum);
}

template <class T>
__global__ void softmax_rows(bool log, const T* x, int64_t r, T* y, T scale, int64_t causal_rows) {
  __shared__ double shared[kBlock];
  int64_t row = blockIdx.x, base = row * r;
  int64_t valid = causal_rows > 0 ? min(r, row % causal_rows + 1) : r;
  T m = -INFINITY;
  for (int64_t k = threadIdx.x; k < valid; k += blockDim.x) {
    T v = x[base + k] * scale;
    m = v > m ? v : m;
  }
  m = static_cast<T>(block_combine(static_cast<double>(m), shared, MaxOp{}));
  if (m == -INFINITY) m = T(0);  // an all -inf row gives NaN like NumPy
  double s = 0;
  for (int64_t k = threadIdx.x; k < valid; k += blockDim.x) s += fn::exp_any(x[base + k] * scale - m);
  double sum = block_combine(s, shared, SumOp{});
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x)
    y[base + k] = k < valid ? write_value(log, x[base + k] * scale, m, sum) : (log ? T(-INFINITY) : T(0));
}

template <class T>
__global__ void softmax_lines(bool log, const T* x, int64_t lines, int64_t r, int64_t inner, T* y, T scale) {
  FG_GRID_LOOP(line, lines) {
    int64_t base = (line / inner) * r * inner + line % inner;
    T m = -INFINITY;
    for (int64_t k = 0; k < r; ++k) {
      T v = x[base + k * inner] * scale;
      m = v > m ? v : m;
    }
    if (m == -INFINITY) m = T(0);
    double sum = 0;
    for (int64_t k = 0; k < r; ++k) sum += fn::exp_any(x[base + k * inner] * scale - m);
    for (int64_t k = 0; k < r; ++k) y[base + k * inner] = write_value(log, x[base + k * inner] * scale, m, sum);
  }
}

}  // namespace

void softmax_cuda(const KernelEnv& env, DType dtype, bool log, const void* x, int64_t outer, int64_t r, int64_t inner, void* y,
                  double scale, int64_t causal_rows) {
  int64_t lines = outer * inner;
  if (lines == 0 || r == 0) return;
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (inner == 1) {
      softmax_rows<T><<<grid_rows(lines, "softmax"), kBlock, 0, kernel_stream(env)>>>(log, xs, r, ys, T(scale), causal_rows);
    } else {
      softmax_lines<T><<<grid_for(lines), kBlock, 0, kernel_stream(env)>>>(log, xs, lines, r, inner, ys, T(scale));
    }
  });
  check_launch("softmax");
}

namespace {

// With a residual `res` the row normalised is s = x + res, written to `s` first: each thread reads
// back only the entries it wrote itself, so no barrier is needed before the statistics.
template <class T>
__global__ void norm_rows(bool rms, const T* x, const T* res, const T* w, const T* b, int64_t cols, double eps, T* s,
                          T* y, T* mean, T* rstd) {
  __shared__ double shared[kBlock];
  const T* row = x + blockIdx.x * cols;
  if (res) {
    T* sum_row = s + blockIdx.x * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum_row[j] = row[j] + res[blockIdx.x * cols + j];
    row = sum_row;
  }
  double mu = 0;
  if (!rms) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += static_cast<double>(row[j]);
    mu = block_combine(s, shared, SumOp{}) / static_cast<double>(cols);
  }
  double ss = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    double d = static_cast<double>(row[j]) - mu;
    ss += d * d;
  }
  double var = block_combine(ss, shared, SumOp{}) / static_cast<double>(cols);
  T inv = static_cast<T>(1.0 / sqrt(var + eps)), m = static_cast<T>(mu);
  T* out = y + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    T v = (row[j] - m) * inv;
    if (w) v *= w[j];
    if (b) v += b[j];
    out[j] = v;
  }
  if (threadIdx.x == 0) {
    if (mean) mean[blockIdx.x] = m;
    rstd[blockIdx.x] = inv;
  }
}

// With `acc` (a residual's gradient, rows x cols) dx = that + acc, else overwritten.
template <class T>
__global__ void norm_backward_rows(bool rms, const T* g, const T* x, const T* w, const T* mean, const T* rstd,
                                   const T* acc, int64_t cols, T* dx) {
  __shared__ double shared[kBlock];
  int64_t base = blockIdx.x * cols;
  const T mu = rms ? T(0) : mean[blockIdx.x], inv = rstd[blockIdx.x];
  double sum_gw = 0, sum_gwx = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    T h = (x[base + j] - mu) * inv;
    T gw = w ? g[base + j] * w[j] : g[base + j];
    sum_gw += static_cast<double>(gw);
    sum_gwx += static_cast<double>(gw) * static_cast<double>(h);
  }
  const T a = rms ? T(0) : T(block_combine(sum_gw, shared, SumOp{}) / static_cast<double>(cols));
  const T c = T(block_combine(sum_gwx, shared, SumOp{}) / static_cast<double>(cols));
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    T h = (x[base + j] - mu) * inv;
    T gw = w ? g[base + j] * w[j] : g[base + j];
    T d = inv * (gw - a - h * c);
    dx[base + j] = acc ? d + acc[base + j] : d;
  }
}

// The weight and bias gradients: per column j, the sums over rows of g * xhat and of g. A block
// covers a strip of kStrip adjacent columns (a warp row reads them coalesced) with kRowThreads
// rows of threads striding down the rows, then adds the row threads' partials per column in
// order; accumulates in double (review G5: one thread per column walked every row on a few SMs).
constexpr int kStrip = 32, kRowThreads = 32;

template <class T>
__global__ void norm_param_grads(const T* g,     // (rows, cols)
                                 const T* x,     // (rows, cols)
                                 const T* mean,  // (rows), null for rms_norm
                                 const T* rstd,  // (rows)
                                 int64_t rows, int64_t cols,
                                 T* dw, T* db) {  // (cols) each, overwritten
  __shared__ double part_w[kRowThreads][kStrip + 1], part_b[kRowThreads][kStrip + 1];
  const int64_t j = blockIdx.x * static_cast<int64_t>(kStrip) + threadIdx.x;
  double sum_w = 0, sum_b = 0;
  if (j < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowThreads) {
      T h = (x[r * cols + j] - (mean ? mean[r] : T(0))) * rstd[r];
      T gv = g[r * cols + j];
      sum_w += static_cast<double>(gv * h);
      sum_b += static_cast<double>(gv);
    }
  }
  part_w[threadIdx.y][threadIdx.x] = sum_w;
  part_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    double w = 0, b = 0;
    for (int y = 0; y < kRowThreads; ++y) {
      w += part_w[y][threadIdx.x];
      b += part_b[y][threadIdx.x];
    }
    dw[j] = static_cast<T>(w);
    db[j] = static_cast<T>(b);
  }
}

}  // namespace

void layer_norm_cuda(const KernelEnv& env, DType dtype, const void* x, const void* w, const void* b, int64_t rows, int64_t cols, double eps,
                     void* y, void* mean, void* rstd) {
  add_layer_norm_cuda(env, dtype, x, nullptr, w, b, rows, cols, eps, nullptr, y, mean, rstd);
}

// r null: plain layer_norm (s unused).
void add_layer_norm_cuda(const KernelEnv& env, DType dtype, const void* x, const void* r, const void* w, const void* b,
                         int64_t rows, int64_t cols, double eps, void* s, void* y, void* mean, void* rstd) {
  if (rows == 0 || cols == 0) return;
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    norm_rows<T><<<grid_rows(rows, r ? "add_layer_norm" : "layer_norm"), kBlock, 0, kernel_stream(env)>>>(
        false, static_cast<const T*>(x), static_cast<const T*>(r), static_cast<const T*>(w), static_cast<const T*>(b),
        cols, eps, static_cast<T*>(s), static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd));
  });
  check_launch("layer_norm");
}

void rms_norm_cuda(const KernelEnv& env, DType dtype, const void* x, const void* w, int64_t rows, int64_t cols, double eps, void* y,
                   void* rstd) {
  if (rows == 0 || cols == 0) return;
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    norm_rows<T><<<grid_rows(rows, "rms_norm"), kBlock, 0, kernel_stream(env)>>>(
        true, static_cast<const T*>(x), nullptr, static_cast<const T*>(w), nullptr, cols, eps, nullptr,
        static_cast<T*>(y), nullptr, static_cast<T*>(rstd));
  });
  check_launch("rms_norm");
}

void norm_backward_cuda(const KernelEnv& env, DType dtype, bool rms, const void* g, const void* x, const void* w, const void* mean,
                        const void* rstd, const void* acc, int64_t rows, int64_t cols, void* dx, void* dw, void* db) {
  if (cols == 0) return;
  visit_float_dtype(dtype, "norm backward", [&](auto tag) {
    using T = decltype(tag);
    const T* means = rms ? nullptr : static_cast<const T*>(mean);
    if (rows > 0)
      norm_backward_rows<T><<<grid_rows(rows, "norm backward"), kBlock, 0, kernel_stream(env)>>>(
          rms, static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(w), means,
          static_cast<const T*>(rstd), static_cast<const T*>(acc), cols, static_cast<T*>(dx));
    unsigned strips = static_cast<unsigned>((cols + kStrip - 1) / kStrip);
    norm_param_grads<T><<<strips, dim3(kStrip, kRowThreads), 0, kernel_stream(env)>>>(
        static_cast<const T*>(g), static_cast<const T*>(x), means, static_cast<const T*>(rstd), rows, cols,
        static_cast<T*>(dw), static_cast<T*>(db));
  });
  check_launch("norm backward");
}

}  // namespace fg
