#include "flowgrad/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "flowgrad/core/env.h"
#include "flowgrad/core/errors.h"

namespace fg {
namespace {

constexpr size_t kAlignment = 64;

// Four classes per power of two: waste is at most 25%.
size_t size_class(size_t bytes) {
  if (bytes <= kAlignment) return kAlignment;
  size_t pow2 = kAlignment;
  while (pow2 * 2 < bytes) pow2 *= 2;
  for (size_t quarter = 1; quarter <= 4; ++quarter) {
    size_t candidate = pow2 + pow2 / 4 * quarter;
    if (candidate >= bytes) return (candidate + kAlignment - 1) / kAlignment * kAlignment;
  }
  return pow2 * 2;
}

struct State {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats;
};

State& state() {
  static State* s = new State();  // never destroyed: tensors may die after static teardown
  return *s;
}

void free_cached_locked(State& s) {
  for (auto& [size, blocks] : s.free_blocks)
    for (void* p : blocks) std::free(p);
  s.free_blocks.clear();
  s.stats.cached = 0;
}

}  // namespace

CpuAllocator& CpuAllocator::get() {
  static CpuAllocator allocator;
  return allocator;
}

void* CpuAllocator::allocate(size_t bytes, size_t* granted) {
  State& s = state();
  size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.free_blocks.find(size);
  void* ptr = nullptr;
  if (it != s.free_blocks.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    s.stats.cached -= static_cast<int64_t>(size);
  } else {
    ptr = std::aligned_alloc(kAlignment, size);
    if (!ptr && s.stats.cached > 0) {
      free_cached_locked(s);
      ptr = std::aligned_alloc(kAlignment, size);
    }
    FG_CHECK(ptr, OutOfMemory, "cpu: cannot allocate ", bytes, " bytes (",
             static_cast<double>(bytes) / (1 << 30), " GiB); allocator holds ",
             s.stats.allocated, " bytes in live tensors, peak ", s.stats.peak_allocated);
  }
  s.stats.allocated += static_cast<int64_t>(size);
  if (s.stats.allocated > s.stats.peak_allocated) s.stats.peak_allocated = s.stats.allocated;
  *granted = size;
  return ptr;
}

void CpuAllocator::release(void* ptr, size_t granted) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.allocated -= static_cast<int64_t>(granted);
  if (s.stats.cached + static_cast<int64_t>(granted) > env::cpu_cache_bytes()) {
    std::free(ptr);
    return;
  }
  s.free_blocks[granted].push_back(ptr);
  s.stats.cached += static_cast<int64_t>(granted);
}

void CpuAllocator::empty_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  free_cached_locked(s);
}

AllocatorStats CpuAllocator::stats() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

}  // namespace fg
