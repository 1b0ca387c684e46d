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

// Copies `bytes` between two buffers, either of which may be on the CPU; returns when done.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace fg::cuda
