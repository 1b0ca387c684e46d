#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "flowgrad/core/env.h"
#include "flowgrad/base/errors.h"
#include "flowgrad/core/storage.h"
#include "flowgrad/cuda/host_sync.h"
#include "flowgrad/cuda/scope.cuh"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "flowgrad/base/device_error.h"

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

// record_stream's events: recorded at a block's release on each stream that used it.
uintptr_t raw_record_event(uintptr_t stream, int device) {
  DeviceScope guard(device);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "freeing a block used on other streams (cudaEventCreate)");
  check(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)), "freeing a block used on other streams (cudaEventRecord)");
  return reinterpret_cast<uintptr_t>(e);
}

bool raw_event_done(uintptr_t event) {
  cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it so the next launch check does not see it
    return false;
  }
  check(err, "reusing a block used on other streams (cudaEventQuery)");
  return true;
}

void raw_destroy_event(uintptr_t event) { cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)); }

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator(
      {&raw_allocate, &raw_release, &raw_record_event, &raw_event_done, &raw_destroy_event},
      env::cuda_caching());  // lives to exit
  return *a;
}

struct Workspaces {
  std::mutex mutex;
  std::map<std::pair<int, uintptr_t>, Workspace> by_stream;
  std::atomic<uint64_t> epoch{0};
};
Workspaces& workspaces() {
  static auto* w = new Workspaces;  // lives to exit, like the allocator
  return *w;
}

// PyTorch's defaults: 32 MiB from Hopper on (cuBLAS's guidance for sm_90), 2 x 4 MiB + 8 x 16 KiB before.
size_t workspace_bytes(int device) {
  int64_t mb = env::cublas_workspace_mb();
  if (mb >= 0) return static_cast<size_t>(mb) << 20;
  int major = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cuBLAS workspace (cudaDeviceGetAttribute)");
  return major >= 9 ? size_t{32} << 20 : size_t{4096 * 1024 * 2 + 16 * 1024 * 8};
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

void host_wait(cudaError_t err, const char* what) {
  count_host_sync();
  check(err, what);
  raise_device_errors();
  raise_deferred_errors();
}

void synchronize() {
  std::string why;
  if (device_count(&why) == 0) return;
  host_wait(cudaDeviceSynchronize(), "cuda.synchronize");
}

void install() {
  DeviceAllocatorHooks hooks;
  hooks.allocate = [](size_t bytes, int device, size_t* granted) {
    require_device(device);
    raise_deferred_errors();
    *granted = CachingAllocator::round_size(bytes);
    // Blocks belong to the stream they are allocated on and are reused only there.
    StreamHandle stream = current_stream_handle(device);
    FG_CHECK(!capturing(stream), Device, "allocating ", bytes, " bytes on cuda:", device,
             " while the stream is being captured into a CUDA graph (the graph would keep a block the allocator "
             "may hand out again)");
    return allocator().allocate(bytes, device, stream);
  };
  hooks.release = [](void* p, size_t, int) {  // from ~Storage: never throws (review G2)
    never_throwing("releasing device memory", [p] { allocator().release(p); });
  };
  set_cuda_allocator(hooks);
}

MemoryStats memory_stats(int device) { return allocator().stats(device); }
void reset_peak_memory_stats(int device) { allocator().reset_peak(device); }
void empty_cache() {
  std::string why;
  if (device_count(&why) > 0) allocator().empty_cache();
}

Workspace stream_workspace(int device, uintptr_t stream) {
  Workspaces& w = workspaces();
  std::lock_guard<std::mutex> lock(w.mutex);
  auto [it, fresh] = w.by_stream.try_emplace({device, stream});
  if (fresh && (it->second.bytes = workspace_bytes(device)) > 0) {
    try {
      it->second.ptr = allocator().allocate(it->second.bytes, device, stream);
    } catch (const Error&) {  // out of memory: the handle keeps cuBLAS's own pool
      it->second = Workspace{};
    }
  }
  return it->second;
}

void retire_stream(int device, uintptr_t stream) {
  DeviceScope guard(device);
  count_host_sync();  // its gemms may still use the workspace, its kernels blocks recorded on it
  check(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)), "destroying a stream (cudaStreamSynchronize)");
  {
    Workspaces& w = workspaces();
    std::lock_guard<std::mutex> lock(w.mutex);
    auto it = w.by_stream.find({device, stream});
    if (it != w.by_stream.end()) {
      if (it->second.ptr) allocator().release(it->second.ptr);
      w.by_stream.erase(it);
      w.epoch += 1;
    }
  }
  allocator().forget_stream(stream);  // after the workspace's release: its segment goes back too
}

uint64_t workspace_epoch() { return workspaces().epoch.load(); }

void record_stream(void* data, int device, uintptr_t stream) {
  require_device(device);
  allocator().record_stream(data, stream);
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
  if (dst_device.is_cpu()) host_wait(cudaStreamSynchronize(stream), "copy to the host (cudaStreamSynchronize)");
}


namespace {
// Small host-to-device writes queued before a step (a plan's Philox pair, an optimizer's
// hyper-parameters) are staged in pinned memory: a cudaMemcpyAsync from pageable memory "might be
// synchronous with respect to host" (CUDA's API synchronization behavior), a wait the host-sync
// counter would not see (review G10). A slot is reused once the copy that read it has run.
constexpr size_t kStagingSlotBytes = 4096;
constexpr size_t kStagingSlots = 8;
struct StagingSlot {
  void* host = nullptr;           // pinned
  cudaEvent_t read = nullptr;     // recorded after the copy that reads the slot
};
struct StagingRing {
  std::mutex mutex;
  std::array<StagingSlot, kStagingSlots> slots;
  size_t next = 0;
};
StagingRing& staging(int device) {
  static std::mutex mutex;
  static auto* rings = new std::map<int, StagingRing>;  // lives to exit: the slots are never freed
  std::lock_guard<std::mutex> lock(mutex);
  return (*rings)[device];
}
}  // namespace

void copy_to_device_async(void* dst, Device device, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FG_ASSERT(device.is_cuda());
  require_device(device.index);
  DeviceScope guard(device.index);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(current_stream_handle(device.index));
  if (bytes > kStagingSlotBytes || capturing(reinterpret_cast<StreamHandle>(stream)))
    return copy_bytes(dst, device, src, cpu_device(), bytes);  // a capture reads its source at replay: not a slot
  StagingRing& ring = staging(device.index);
  std::lock_guard<std::mutex> lock(ring.mutex);
  StagingSlot& slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % kStagingSlots;
  if (!slot.host) {
    check(cudaHostAlloc(&slot.host, kStagingSlotBytes, cudaHostAllocPortable), "staging a host copy (cudaHostAlloc)");
    check(cudaEventCreateWithFlags(&slot.read, cudaEventDisableTiming), "staging a host copy (cudaEventCreate)");
  } else if (cudaEventQuery(slot.read) == cudaErrorNotReady) {
    cudaGetLastError();  // the slot's last copy has not run yet: a real wait, counted as one
    host_wait(cudaEventSynchronize(slot.read), "staging a host copy (cudaEventSynchronize)");
  }
  std::memcpy(slot.host, src, bytes);
  check(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, stream), "staged copy to the device (cudaMemcpyAsync)");
  check(cudaEventRecord(slot.read, stream), "staging a host copy (cudaEventRecord)");
}

}  // namespace fg::cuda
