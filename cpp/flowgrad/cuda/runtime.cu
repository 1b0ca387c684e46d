#include <cuda_runtime.h>

#include "flowgrad/core/env.h"
#include "flowgrad/core/errors.h"
#include "flowgrad/cuda/scope.cuh"
#include "flowgrad/core/storage.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "kernels/common/device_error.h"

namespace fg::cuda {
namespace {

void* raw_allocate(size_t bytes, int device) {
  DeviceScope guard(device);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // out of memory is reported by the allocator, with its statistics
    return nullptr;
  }
  check(err, "cudaMalloc");
  return p;
}

void raw_release(void* p, int device) {
  DeviceScope guard(device);
  check(cudaFree(p), "cudaFree");
}

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator({&raw_allocate, &raw_release}, env::cuda_caching());  // lives to exit
  return *a;
}

void require_device(int device) {
  std::string why;
  int count = device_count(&why);
  FG_CHECK(count > 0, Device, "cuda:", device, " is not available: ", why);
  FG_CHECK(device >= 0 && device < count, Device, "cuda:", device, " does not exist (", count, " device(s) visible)");
}

// Stream `to` of cuda:<to_device> waits for the work queued so far on stream `from` of
// cuda:<from_device> (each call with its stream's device current: handle 0 is that device's
// legacy stream).
void order(int from_device, StreamHandle from, int to_device, StreamHandle to) {
  cudaEvent_t done = nullptr;
  {
    DeviceScope on_source(from_device);
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "copy between devices (cudaEventCreate)");
    check(cudaEventRecord(done, reinterpret_cast<cudaStream_t>(from)), "copy between devices (cudaEventRecord)");
  }
  DeviceScope on_target(to_device);
  check(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(to), done, 0), "copy between devices (cudaStreamWaitEvent)");
  cudaEventDestroy(done);  // released once the wait is satisfied
}

}  // namespace

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
  check(cudaDeviceSynchronize(), "cuda.synchronize");
  raise_device_errors();
}

void install() {
  DeviceAllocatorHooks hooks;
  hooks.allocate = [](size_t bytes, int device, size_t* granted) {
    require_device(device);
    *granted = CachingAllocator::round_size(bytes);
    // Blocks belong to the stream they are allocated on and are reused only there.
    StreamHandle stream = current_stream_handle(device);
    FG_CHECK(!capturing(stream), Device, "allocating ", bytes, " bytes on cuda:", device,
             " while the stream is being captured into a CUDA graph (the graph would keep a block the allocator "
             "may hand out again)");
    return allocator().allocate(bytes, device, stream);
  };
  hooks.release = [](void* p, size_t, int) { allocator().release(p); };
  set_cuda_allocator(hooks);
}

MemoryStats memory_stats(int device) { return allocator().stats(device); }
void reset_peak_memory_stats(int device) { allocator().reset_peak(device); }
void empty_cache() {
  std::string why;
  if (device_count(&why) > 0) allocator().empty_cache();
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  require_device(device);
  DeviceScope guard(device);
  // On the current stream, after the work queued there; a copy to the host waits for it.
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(current_stream_handle(device));
  // Between two GPUs: after the work that made the source on its device's stream, and before
  // that stream's later work (which may reuse the source's block).
  const bool peer = src_device.is_cuda() && src_device.index != device;
  const StreamHandle source = peer ? current_stream_handle(src_device.index) : 0;
  if (peer) order(src_device.index, source, device, reinterpret_cast<StreamHandle>(stream));
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "copy between devices (cudaMemcpyAsync)");
  if (peer) order(device, reinterpret_cast<StreamHandle>(stream), src_device.index, source);
  if (dst_device.is_cpu()) check(cudaStreamSynchronize(stream), "copy to the host (cudaStreamSynchronize)");
  if (dst_device.is_cpu()) raise_device_errors();  // a host read: report what kernels found
}

}  // namespace fg::cuda
