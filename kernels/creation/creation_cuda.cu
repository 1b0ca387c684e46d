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

template <class T>
__global__ void random_kernel(RandomKind kind, uint64_t seed, uint64_t offset, int64_t n, int64_t low, int64_t high,
                              T* out) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) out[i] = random_element<T>(kind, seed, offset, i, low, high);
}

}  // namespace

void random_cuda(RandomKind kind, DType dtype, uint64_t seed, uint64_t offset, int64_t n, int64_t low, int64_t high,
                 void* out) {
  if (n == 0) return;
  int threads = 256;
  int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      random_kernel<T><<<blocks, threads>>>(kind, seed, offset, n, low, high, static_cast<T*>(out));
  });
  cudaError_t err = cudaGetLastError();
  FG_CHECK(err == cudaSuccess, Device, "random fill on cuda: kernel launch failed: ", cudaGetErrorString(err));
}

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
