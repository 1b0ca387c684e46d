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
// only there, so a captured CUDA graph keeps stable addresses. A block used on other streams
// too (record_stream, PyTorch's semantics) is not reused at release: an event is recorded on
// each of those streams then, and the block returns to its pool once they have all completed
// (checked before each allocation). With `caching` off every request goes straight to the
// backend (for compute-sanitizer; its free waits for the device, so nothing is deferred).
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
  // Events for record_stream: one recorded after the work queued so far on `stream` of `device`,
  // whether it has completed, and its release.
  uintptr_t (*record_event)(uintptr_t stream, int device) = nullptr;
  bool (*event_done)(uintptr_t event) = nullptr;
  void (*destroy_event)(uintptr_t event) = nullptr;
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
  int64_t deferred_frees = 0;  // released blocks waiting for other streams' work (record_stream)
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
  // Marks the live block starting at `ptr` as used on `stream` too: its release defers reuse until
  // the work queued on `stream` by then has finished. Memory this allocator does not own (a view
  // into a plan's arena, a DLPack import) is never reused by it, so nothing is recorded for it.
  void record_stream(void* ptr, uintptr_t stream);
  // `stream` is about to be destroyed and its queued work has finished (the caller synchronised
  // it): no block waits for it any more (review G2), and its pools' wholly free segments go back
  // to the backend (G11), since its handle is never used again.
  void forget_stream(uintptr_t stream);
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
    std::vector<uintptr_t> uses = {};  // other streams it was recorded on since allocation
  };
  struct DeferredFree {
    Block* block;
    std::vector<uintptr_t> events;  // one per stream of block->uses, recorded at release
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
  void free_block(Block* b);  // back to its pool, merged with free neighbours
  void reclaim_deferred();    // frees the deferred blocks whose events have all completed
  Block* new_segment(size_t segment_bytes, int device, uintptr_t stream, bool small);
  // Returns wholly free segments to the backend: of `device` (every device when < 0), and only
  // those of `stream`'s pools when it is given.
  void release_free_segments(int device, const uintptr_t* stream = nullptr);
  [[noreturn]] void out_of_memory(size_t bytes, int device) const;
  MemoryStats& stats_of(int device);

  RawBackend backend_;
  bool caching_;
  mutable std::mutex mutex_;
  std::map<PoolKey, Pool> pools_;
  std::map<void*, Block*> live_;
  std::vector<Block*> segments_;  // first block of each segment
  std::vector<DeferredFree> deferred_;
  std::map<int, MemoryStats> stats_;
};

}  // namespace fg::cuda
