// CPU allocator: 64-byte aligned blocks from size classes, with a cache of freed blocks so that
// eager training does not call malloc for every op.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fg {

struct AllocatorStats {
  int64_t allocated = 0;       // bytes in live blocks
  int64_t peak_allocated = 0;
  int64_t cached = 0;          // bytes in freed blocks kept for reuse
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
