// CPU allocator: 64-byte aligned blocks from size classes, with a cache of freed blocks so that
// eager training does not call malloc for every op.
#pragma once
#include <cstddef>
#include <cstdint>

#include "flowgrad/core/device.h"

namespace fg {

struct AllocatorStats {
  int64_t allocated = 0;       // bytes in live blocks
  int64_t peak_allocated = 0;
  int64_t cached = 0;          // bytes in freed blocks kept for reuse
};

// Storages allocated so far on every device (Storage::allocate calls, cache hits included): a
// compiled plan compares it before and after its instructions to prove they allocate nothing.
uint64_t storage_allocations();

// A block for kernel temporaries (Tensor::temporary, core/tensor.h): a compiled plan passes its own in
// every KernelEnv, so the temporaries a kernel wrapper makes (contiguous copies, casts, widened
// indices, workspaces) come from bytes reserved once, not from the allocator. With capacity 0 it
// only measures: `peak` is the most bytes one kernel asked for.
struct KernelScratch {
  void* base = nullptr;
  size_t capacity = 0;
  size_t used = 0;   // bytes handed out since the last reset (the plan resets per kernel call)
  size_t peak = 0;   // the largest `used` seen
  Device device;

  // `bytes` more (64-byte aligned), or null when the block has no room for them (the request
  // still counts towards `peak`, so the block can grow to it).
  void* take(size_t bytes) {
    if (bytes == 0) return nullptr;
    size_t at = used;
    used += (bytes + 63) / 64 * 64;
    peak = used > peak ? used : peak;
    return used <= capacity ? static_cast<char*>(base) + at : nullptr;
  }
};

class CpuAllocator {
 public:
  static CpuAllocator& get();
  // Returns a block of at least `bytes` (the granted size goes to *granted). Raises
  // OutOfMemoryError with the statistics when the system cannot provide it.
  void* allocate(size_t bytes, size_t* granted);
  void release(void* ptr, size_t granted);
  void empty_cache();
  AllocatorStats stats() const;
};

}  // namespace fg
