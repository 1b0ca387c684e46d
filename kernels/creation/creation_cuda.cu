// CUDA creation kernels. This is the first CUDA translation unit: every build with nvcc
// compiles and links it, so the CUDA toolchain path is exercised from day one.
#include <cuda_runtime.h>

#include "kernels/creation/creation.h"

namespace fg {
namespace {

template <class T>
__global__ void fill_kernel(T* data, int64_t n, T value) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) data[i] = value;
}

}  // namespace

void fill_cuda(DType dtype, void* data, int64_t n, double value) {
  if (n == 0) return;
  int threads = 256;
  int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, bool>) v = value != 0.0;
    else if constexpr (std::is_same_v<T, double> || std::is_integral_v<T>) v = static_cast<T>(value);
    else v = T(static_cast<float>(value));  // float and the half types
    fill_kernel<T><<<blocks, threads>>>(static_cast<T*>(data), n, v);
  });
  cudaError_t err = cudaGetLastError();
  FG_CHECK(err == cudaSuccess, Device, "fill on cuda: kernel launch failed: ",
           cudaGetErrorString(err));
}

}  // namespace fg
