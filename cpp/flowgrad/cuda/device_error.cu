// The per-device records behind device_error.h: a claim flag in device memory and a record in
// pinned host memory mapped into the device's address space.
#include <cstring>
#include <mutex>

#include <cuda_runtime.h>

#include "flowgrad/base/device_error.h"
#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/stream.h"

namespace fg {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceErrorSlot {
  int* claimed = nullptr;              // device memory
  IndexErrorRecord* host = nullptr;    // pinned host memory
  IndexErrorRecord* device = nullptr;  // the same memory as the device addresses it
};

std::mutex g_mutex;
DeviceErrorSlot g_slots[kMaxDevices];

// The memsets below go to this thread's current stream, as every launch does (launch.cuh).
cudaStream_t memset_stream() { return reinterpret_cast<cudaStream_t>(cuda::launch_stream()); }

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) cudaGetLastError();  // reported here, not again by the next launch check
  FG_CHECK(err == cudaSuccess, Device, "index error record: ", what, " failed: ", cudaGetErrorString(err));
}

// A device's record and claim flag, complete or not at all (what was made is freed on an error).
DeviceErrorSlot make_slot() {
  void* host = nullptr;
  void* claimed = nullptr;
  try {
    check(cudaHostAlloc(&host, sizeof(IndexErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    static_cast<IndexErrorRecord*>(host)->set = 0;
    void* mapped = nullptr;
    check(cudaHostGetDevicePointer(&mapped, host, 0), "cudaHostGetDevicePointer");
    check(cudaMalloc(&claimed, sizeof(int)), "cudaMalloc");
    cudaStream_t stream = memset_stream();
    check(cudaMemsetAsync(claimed, 0, sizeof(int), stream), "cudaMemsetAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the zero lands before any kernel reads it
    return {static_cast<int*>(claimed), static_cast<IndexErrorRecord*>(host), static_cast<IndexErrorRecord*>(mapped)};
  } catch (const Error&) {
    if (claimed) cudaFree(claimed);
    if (host) cudaFreeHost(host);
    throw;
  }
}

}  // namespace

IndexCheckOp index_check_op(const char* name) {
  for (int32_t code = 0; code <= static_cast<int32_t>(IndexCheckOp::CrossEntropy); ++code) {
    auto op = static_cast<IndexCheckOp>(code);
    if (std::strcmp(index_check_op_name(op), name) == 0) return op;
  }
  fail(ErrorKind::Runtime, "index check: no device error code for op ", name);
}

IndexErrorSink index_error_sink() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  FG_CHECK(device < kMaxDevices, Device, "index error record: device ", device, " is beyond the ", kMaxDevices,
           " this build tracks");
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceErrorSlot& slot = g_slots[device];
  if (!slot.claimed) {
    // Allocations and a device sync cannot be captured: capture prepares the sink beforehand
    // (cuda/captured_graph.cu), so this only meets a capture that did not.
    FG_CHECK(!cuda::capturing(cuda::launch_stream()), Device, "index error record: cuda:", device,
             " first used inside a CUDA graph capture; run the step once uncaptured first");
    slot = make_slot();
  }
  return {slot.claimed, slot.device};
}

void raise_device_errors() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (int device = 0; device < kMaxDevices; ++device) {
    DeviceErrorSlot& slot = g_slots[device];
    if (!slot.host || !slot.host->set) continue;
    IndexErrorRecord seen = {slot.host->value, slot.host->size, slot.host->op, slot.host->dim, 1};
    slot.host->set = 0;
    {  // the flag is clear once this returns, so a report from any stream after it is kept
      cuda::DeviceGuard on_device(device);
      cudaStream_t stream = memset_stream();
      check(cudaMemsetAsync(slot.claimed, 0, sizeof(int), stream), "cudaMemsetAsync");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    fail(ErrorKind::Index, index_check_op_name(seen.op), ": index ", seen.value,
         " is out of range for dimension ", seen.dim, " of size ", seen.size,
         " (found on cuda:", device, " by a kernel that ran before this synchronisation)");
  }
}

}  // namespace fg
