// The caching allocator behind CUDA tensors. It is plain C++ over a raw backend (cudaMalloc /
// cudaFree in CUDA builds; a fake in the C++ tests), so its policy is tested on any machine.
//
// Policy (the shape of PyTorch's, for the same reasons): requests are rounded up (512-byte
// multiples); small ones (<= 1 MiB) are carved from 2 MiB segments, large ones get segments
// rounded to 2 MiB. A freed block returns to its pool, merging with free neighbours of the same
// segment; a request takes the best-fitting free block of its stream's pool and splits off the
// remainder when that is worth keeping. When the backend cannot provide a segment, every
// wholly free segment is released and the request retried once; after that OutOfMemoryError
// reports the statistics. Blocks belong to the stream they were allocated on, and are reused
// only there, so a captured CUDA graph keeps stable addresses. With `caching` off every
// request goes straight to the backend (for compute-sanitizer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace fg::cuda {

struct RawBackend {
  // Returns nullptr when the device is out of memory.
  void* (*allocate)(size_t bytes, int device) = nullptr;
  void (*release)(void* ptr, int device) = nullptr;
};

struct MemoryStats {
  int64_t allocated = 0;       // bytes in live blocks (as requested, after rounding)
  int64_t peak_allocated = 0;
  int64_t reserved = 0;        // bytes in segments held from the backend
  int64_t peak_reserved = 0;
  int64_t segments = 0;
  int64_t allocations = 0;     // live blocks
  int64_t backend_calls = 0;   // segments ever requested from the backend
  int64_t retries = 0;         // times the cache was released to satisfy a request
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmall = size_t{1} << 20;        // requests up to this share segments
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  CachingAllocator(RawBackend backend, bool caching) : backend_(backend), caching_(caching) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` on `device` for use on `stream` (an opaque handle; 0 = default).
  void* allocate(size_t bytes, int device, uintptr_t stream = 0);
  void release(void* ptr);
  void empty_cache();  // returns every wholly free segment to the backend
  MemoryStats stats(int device) const;
  void reset_peak(int device);
  bool caching() const { return caching_; }
  static size_t round_size(size_t bytes);

 private:
  struct Block {
    char* ptr;
    size_t size;
    int device;
    uintptr_t stream;
    bool free = false;
    bool small;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  struct PoolKey {
    int device;
    uintptr_t stream;
    bool small;
    bool operator<(const PoolKey& o) const {
      if (device != o.device) return device < o.device;
      if (stream != o.stream) return stream < o.stream;
      return small < o.small;
    }
  };
  using Pool = std::set<Block*, BySize>;

  Block* take_free(Pool& pool, size_t size);
  Block* new_segment(size_t segment_bytes, int device, uintptr_t stream, bool small);
  void release_free_segments(int device);  // every device when device < 0
  [[noreturn]] void out_of_memory(size_t bytes, int device) const;
  MemoryStats& stats_of(int device);

  RawBackend backend_;
  bool caching_;
  mutable std::mutex mutex_;
  std::map<PoolKey, Pool> pools_;
  std::map<void*, Block*> live_;
  std::vector<Block*> segments_;  // first block of each segment
  std::map<int, MemoryStats> stats_;
};

}  // namespace fg::cuda
