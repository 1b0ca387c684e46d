// Block-wide reductions for CUDA kernels: every thread contributes one value (a double, or an
// int64 for exact integer sums) and every thread receives the combined value. blockDim.x must be
// a power of two no larger than the shared buffer the caller passes.
#pragma once
#include <cstdint>

namespace fg {

template <class T, class V, class Op>  // T: the shared buffer's type, which v is converted to
__device__ __forceinline__ T block_combine(V v, T* shared, Op op) {
  shared[threadIdx.x] = static_cast<T>(v);
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  T total = shared[0];
  __syncthreads();  // the buffer may be reused at once
  return total;
}

struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct WrappingSumOp {  // int64 sums wrap as two's complement does, so any order gives the same bits
  __device__ int64_t operator()(int64_t a, int64_t b) const {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
};
struct MaxOp {  // NaN never wins, like the `v > m ? v : m` loops
  __device__ double operator()(double a, double b) const { return b > a ? b : a; }
};

}  // namespace fg
