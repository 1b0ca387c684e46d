// Block-wide reductions for CUDA kernels: every thread contributes one double and every thread
// receives the combined value. blockDim.x must be a power of two no larger than the shared
// buffer the caller passes.
#pragma once

namespace fg {

template <class Op>
__device__ __forceinline__ double block_combine(double v, double* shared, Op op) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();  // the buffer may be reused at once
  return total;
}

struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct MaxOp {  // NaN never wins, like the `v > m ? v : m` loops
  __device__ double operator()(double a, double b) const { return b > a ? b : a; }
};

}  // namespace fg
