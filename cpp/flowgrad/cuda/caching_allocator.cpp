#include "flowgrad/cuda/caching_allocator.h"

#include <algorithm>

#include "flowgrad/base/errors.h"

namespace fg::cuda {
namespace {

// A split leaves a free remainder only when it is at least this large (smaller tails stay with
// the block: they would only fragment the pool).
size_t min_remainder(bool small) { return small ? CachingAllocator::kRound : CachingAllocator::kSmall; }

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

CachingAllocator::~CachingAllocator() {
  for (const DeferredFree& d : deferred_)
    for (uintptr_t e : d.events) backend_.destroy_event(e);
  for (Block* first : segments_) {
    backend_.release(first->ptr, first->device);
    for (Block* b = first; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  return bytes == 0 ? kRound : (bytes + kRound - 1) / kRound * kRound;
}

MemoryStats& CachingAllocator::stats_of(int device) { return stats_[device]; }

CachingAllocator::Block* CachingAllocator::take_free(Pool& pool, size_t size) {
  Block probe{nullptr, size, 0, 0, true, false};
  auto it = pool.lower_bound(&probe);  // the smallest free block that fits (best fit)
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(size_t segment_bytes, int device, uintptr_t stream, bool small) {
  void* p = backend_.allocate(segment_bytes, device);
  if (!p) return nullptr;
  auto* b = new Block{static_cast<char*>(p), segment_bytes, device, stream, false, small};
  segments_.push_back(b);
  MemoryStats& s = stats_of(device);
  s.reserved += static_cast<int64_t>(segment_bytes);
  s.peak_reserved = std::max(s.peak_reserved, s.reserved);
  s.segments += 1;
  s.backend_calls += 1;
  return b;
}

void* CachingAllocator::allocate(size_t bytes, int device, uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t size = round_size(bytes);
  MemoryStats& s = stats_of(device);
  if (!caching_) {
    void* p = backend_.allocate(size, device);
    if (!p) out_of_memory(bytes, device);
    live_[p] = new Block{static_cast<char*>(p), size, device, stream, false, false};
    s.allocated += static_cast<int64_t>(size);
    s.reserved += static_cast<int64_t>(size);
    s.peak_allocated = std::max(s.peak_allocated, s.allocated);
    s.peak_reserved = std::max(s.peak_reserved, s.reserved);
    s.allocations += 1;
    s.backend_calls += 1;
    return p;
  }
  reclaim_deferred();
  bool small = size <= kSmall;
  Pool& pool = pools_[PoolKey{device, stream, small}];
  Block* b = take_free(pool, size);
  if (!b) {
    size_t segment = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
    b = new_segment(segment, device, stream, small);
    if (!b) {
      release_free_segments(device);
      stats_of(device).retries += 1;
      b = new_segment(segment, device, stream, small);
    }
    if (!b) out_of_memory(bytes, device);
  }
  if (b->size - size >= min_remainder(small)) {
    auto* rest = new Block{b->ptr + size, b->size - size, device, stream, true, small, b, b->next};
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool.insert(rest);
  }
  b->free = false;
  live_[b->ptr] = b;
  MemoryStats& st = stats_of(device);
  st.allocated += static_cast<int64_t>(b->size);
  st.peak_allocated = std::max(st.peak_allocated, st.allocated);
  st.allocations += 1;
  return b->ptr;
}

void CachingAllocator::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  FG_ASSERT(it != live_.end());
  Block* b = it->second;
  live_.erase(it);
  MemoryStats& s = stats_of(b->device);
  s.allocated -= static_cast<int64_t>(b->size);
  s.allocations -= 1;
  if (!caching_) {
    s.reserved -= static_cast<int64_t>(b->size);
    backend_.release(b->ptr, b->device);
    delete b;
    return;
  }
  if (!b->uses.empty()) {
    DeferredFree d{b, {}};
    for (uintptr_t stream : b->uses) d.events.push_back(backend_.record_event(stream, b->device));
    b->uses.clear();
    deferred_.push_back(std::move(d));
    s.deferred_frees += 1;
    return;
  }
  free_block(b);
}

void CachingAllocator::record_stream(void* ptr, uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end() || !caching_) return;
  Block* b = it->second;
  FG_ASSERT(backend_.record_event);
  if (stream != b->stream && std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end())
    b->uses.push_back(stream);
}

void CachingAllocator::forget_stream(uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [ptr, b] : live_) b->uses.erase(std::remove(b->uses.begin(), b->uses.end(), stream), b->uses.end());
  // Its pools' wholly free segments would wait for a stream with the same handle (review G11: a
  // capture stream's 32 MiB cuBLAS workspace per profile() or re-capture): back to the device.
  release_free_segments(-1, &stream);
}

void CachingAllocator::reclaim_deferred() {
  auto done = [&](const DeferredFree& d) {
    for (uintptr_t e : d.events)
      if (!backend_.event_done(e)) return false;
    return true;
  };
  std::vector<DeferredFree> waiting;
  for (DeferredFree& d : deferred_) {
    if (!done(d)) {
      waiting.push_back(std::move(d));
      continue;
    }
    for (uintptr_t e : d.events) backend_.destroy_event(e);
    stats_of(d.block->device).deferred_frees -= 1;
    free_block(d.block);
  }
  deferred_ = std::move(waiting);
}

void CachingAllocator::free_block(Block* b) {
  Pool& pool = pools_[PoolKey{b->device, b->stream, b->small}];
  for (Block* n : {b->prev, b->next}) {  // merge with free neighbours of the same segment
    if (!n || !n->free) continue;
    pool.erase(n);
    Block* lo = n == b->prev ? n : b;
    Block* hi = n == b->prev ? b : n;
    lo->size += hi->size;
    lo->next = hi->next;
    if (hi->next) hi->next->prev = lo;
    if (hi == b) {
      delete b;
      b = lo;
    } else {
      delete hi;
    }
  }
  b->free = true;
  pool.insert(b);
}

void CachingAllocator::release_free_segments(int device, const uintptr_t* stream) {
  std::vector<Block*> kept;
  for (Block* first : segments_) {
    bool whole = first->free && !first->next && (device < 0 || first->device == device) &&
                 (!stream || first->stream == *stream);
    if (!whole) {
      kept.push_back(first);
      continue;
    }
    pools_[PoolKey{first->device, first->stream, first->small}].erase(first);
    MemoryStats& s = stats_of(first->device);
    s.reserved -= static_cast<int64_t>(first->size);
    s.segments -= 1;
    backend_.release(first->ptr, first->device);
    delete first;
  }
  segments_ = std::move(kept);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  reclaim_deferred();
  release_free_segments(-1);
}

MemoryStats CachingAllocator::stats(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = stats_.find(device);
  return it == stats_.end() ? MemoryStats{} : it->second;
}

void CachingAllocator::reset_peak(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats& s = stats_of(device);
  s.peak_allocated = s.allocated;
  s.peak_reserved = s.reserved;
}

void CachingAllocator::out_of_memory(size_t bytes, int device) const {
  auto it = stats_.find(device);
  MemoryStats s = it == stats_.end() ? MemoryStats{} : it->second;
  fail(ErrorKind::OutOfMemory, "cuda:", device, ": out of memory allocating ", mib(static_cast<int64_t>(bytes)),
       " (allocated ", mib(s.allocated), ", reserved ", mib(s.reserved), " in ", s.segments, " segments, peak allocated ",
       mib(s.peak_allocated), caching_ ? "; retried after releasing the cache)" : "; caching is off)");
}

}  // namespace fg::cuda
