// CUDA softmax / log_softmax with the CPU kernel's semantics (scale, causal rows, an all -inf
// row gives NaN, masked entries 0 or -inf). Rows along the last dim (inner == 1): one block per
// row, partial max and sum combined in shared memory. Strided lines: one thread per line.
#include <cuda_runtime.h>

#include <algorithm>

#include "flowgrad/core/errors.h"
#include "kernels/common/functors.h"
#include "kernels/nn/nn.h"

namespace fg {
namespace {

constexpr int kBlock = 256;

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
  shared[threadIdx.x] = static_cast<double>(m);
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && shared[threadIdx.x + half] > shared[threadIdx.x]) shared[threadIdx.x] = shared[threadIdx.x + half];
    __syncthreads();
  }
  m = static_cast<T>(shared[0]);
  if (m == -INFINITY) m = T(0);  // an all -inf row gives NaN like NumPy
  __syncthreads();
  double s = 0;
  for (int64_t k = threadIdx.x; k < valid; k += blockDim.x) s += fn::exp_any(x[base + k] * scale - m);
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  double sum = shared[0];
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x)
    y[base + k] = k < valid ? write_value(log, x[base + k] * scale, m, sum) : (log ? T(-INFINITY) : T(0));
}

template <class T>
__global__ void softmax_lines(bool log, const T* x, int64_t lines, int64_t r, int64_t inner, T* y, T scale) {
  for (int64_t line = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; line < lines;
       line += static_cast<int64_t>(gridDim.x) * blockDim.x) {
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

void softmax_cuda(DType dtype, bool log, const void* x, int64_t outer, int64_t r, int64_t inner, void* y,
                  double scale, int64_t causal_rows) {
  int64_t lines = outer * inner;
  if (lines == 0 || r == 0) return;
  visit_float_dtype(dtype, "nn kernel", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (inner == 1) {
      FG_CHECK(lines <= INT32_MAX, Value, "softmax on cuda: ", lines, " rows exceed one launch");
      softmax_rows<T><<<static_cast<unsigned>(lines), kBlock>>>(log, xs, r, ys, T(scale), causal_rows);
    } else {
      int blocks = static_cast<int>(std::min<int64_t>((lines + kBlock - 1) / kBlock, 1 << 16));
      softmax_lines<T><<<blocks, kBlock>>>(log, xs, lines, r, inner, ys, T(scale));
    }
  });
  cudaError_t err = cudaGetLastError();
  FG_CHECK(err == cudaSuccess, Device, "softmax on cuda: kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace fg
