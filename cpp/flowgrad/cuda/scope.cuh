// Helpers shared by the CUDA runtime's .cu files (never included by host-only code).
#pragma once
#include <cuda_runtime.h>

#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/stream.h"

namespace fg::cuda {

// Raises a DeviceError naming the call and CUDA's message unless `err` is cudaSuccess. The error
// is cleared first (if it is not sticky): it is reported here, not again by the next launch check.
inline void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  fail(ErrorKind::Device, what, ": ", cudaGetErrorString(err));
}

// The one door for host waits on the GPU: `err` is the result of the blocking call (a stream,
// event or device synchronize). Counts the wait for this thread (host_sync.h), checks the call,
// then raises what kernels reported since the last wait (device_error.h). Defined in runtime.cu.
void host_wait(cudaError_t err, const char* what);

// Makes `device` current for the scope (allocations, copies, stream and event calls act on the
// right GPU), then restores the previous one.
using DeviceScope = DeviceGuard;

}  // namespace fg::cuda
