// The per-device records behind device_error.h: a claim flag in device memory and a record in
// pinned host memory mapped into the device's address space.
#include <cstring>
#include <mutex>

#include "flowgrad/core/errors.h"
#include "kernels/common/device_error.h"
#include "kernels/common/launch.cuh"

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

void check(cudaError_t err, const char* what) {
  FG_CHECK(err == cudaSuccess, Device, "index error record: ", what, " failed: ", cudaGetErrorString(err));
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
    void* host = nullptr;
    check(cudaHostAlloc(&host, sizeof(IndexErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    slot.host = static_cast<IndexErrorRecord*>(host);
    slot.host->set = 0;
    void* mapped = nullptr;
    check(cudaHostGetDevicePointer(&mapped, host, 0), "cudaHostGetDevicePointer");
    slot.device = static_cast<IndexErrorRecord*>(mapped);
    void* claimed = nullptr;
    check(cudaMalloc(&claimed, sizeof(int)), "cudaMalloc");
    check(cudaMemset(claimed, 0, sizeof(int)), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the zero lands before any kernel reads it
    slot.claimed = static_cast<int*>(claimed);
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
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaError_t err = cudaMemset(slot.claimed, 0, sizeof(int));  // synchronous for device memory
    cudaSetDevice(previous);
    check(err, "cudaMemset");
    fail(ErrorKind::Index, index_check_op_name(seen.op), ": index ", seen.value,
         " is out of range for dimension ", seen.dim, " of size ", seen.size,
         " (found on cuda:", device, " by a kernel that ran before this synchronisation)");
  }
}

}  // namespace fg
