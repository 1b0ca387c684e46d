#include <cuda_runtime.h>

#include "flowgrad/core/errors.h"
#include "flowgrad/cuda/runtime.h"

namespace fg::cuda {

bool built_with_cuda() { return true; }

int device_count(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {  // no driver or no device: a normal state, not an error
    if (why) *why = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error state
    return 0;
  }
  if (count == 0 && why) *why = "the CUDA driver reports no devices";
  return count;
}

void synchronize() {
  std::string why;
  if (device_count(&why) == 0) return;
  cudaError_t err = cudaDeviceSynchronize();
  FG_CHECK(err == cudaSuccess, Device, "cuda.synchronize: ", cudaGetErrorString(err));
}

}  // namespace fg::cuda
