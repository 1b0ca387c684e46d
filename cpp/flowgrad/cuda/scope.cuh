// Helpers shared by the CUDA runtime's .cu files (never included by host-only code).
#pragma once
#include <cuda_runtime.h>

#include "flowgrad/core/errors.h"

namespace fg::cuda {

// Raises a DeviceError naming the call and CUDA's message unless `err` is cudaSuccess.
inline void check(cudaError_t err, const char* what) {
  FG_CHECK(err == cudaSuccess, Device, what, ": ", cudaGetErrorString(err));
}

// The one door for host waits on the GPU: `err` is the result of the blocking call (a stream,
// event or device synchronize). Counts the wait for this thread (host_sync.h), checks the call,
// then raises what kernels reported since the last wait (device_error.h). Defined in runtime.cu.
void host_wait(cudaError_t err, const char* what);

// Makes `device` current for the scope (allocations, copies, stream and event calls act on the
// right GPU), then restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (device != previous_) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace fg::cuda
