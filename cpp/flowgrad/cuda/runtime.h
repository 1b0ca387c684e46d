// CUDA runtime: device queries, the caching allocator behind CUDA storage, and copies between
// devices. Builds without CUDA answer "no devices" with the reason and report empty memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "flowgrad/core/device.h"
#include "flowgrad/cuda/caching_allocator.h"

namespace fg::cuda {

bool built_with_cuda();
// Number of usable GPUs; 0 with *why set when there are none (no driver, no device, ...).
int device_count(std::string* why);
void synchronize();

// Registers the caching allocator for CUDA storage (once, at import; a no-op without CUDA).
void install();
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
void empty_cache();
// Tensor.record_stream: the allocator's block at `data` (a storage's base) is also used on `stream`.
void record_stream(void* data, int device, uintptr_t stream);

// cuBLAS workspaces (review F9): one per (device, stream), shared by every thread's handle (work on
// one stream runs in order), taken from the caching allocator so memory_stats counts it, made
// before any gemm on the stream (so never during capture) and released with the stream.
struct Workspace {
  void* ptr = nullptr;  // null: cuBLAS's own pool (size 0, or the device was out of memory)
  size_t bytes = 0;
};
Workspace stream_workspace(int device, uintptr_t stream);
// Before an owned stream is destroyed: waits for its queued work (a host wait), has the allocator
// forget it (no block records an event on a dead handle, review G2) and releases its workspace.
void retire_stream(int device, uintptr_t stream);
// Moves at every release: a handle bound to a released workspace binds again.
uint64_t workspace_epoch();

// Copies `bytes` between two buffers, either of which may be on the CPU; returns when done.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Queues a small host-to-device copy on the device's current stream through pinned staging and
// returns at once: `src` may be reused on return, and the host never waits for the stream
// (falls back to copy_bytes while capturing or above 4 KiB).
void copy_to_device_async(void* dst, Device device, const void* src, size_t bytes);

}  // namespace fg::cuda
