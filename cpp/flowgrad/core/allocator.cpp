#include "flowgrad/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "flowgrad/core/env.h"
#include "flowgrad/base/errors.h"

namespace fg {
namespace {

constexpr size_t kAlignment = 64;

constexpr int kSmallClasses = 16;  // 64, 128, ..., 1024 bytes
constexpr int kClasses = kSmallClasses + 4 * 64;

struct SizeClass {
  size_t bytes;
  int index;  // into State::free_blocks; the same for a size and for its class's size
};

// Multiples of 64 bytes up to 1 KiB, then four classes per power of two (waste <= 25%).
SizeClass size_class(size_t bytes) {
  if (bytes <= 1024) {
    size_t units = bytes <= kAlignment ? 1 : (bytes + kAlignment - 1) / kAlignment;
    return {units * kAlignment, static_cast<int>(units) - 1};
  }
  size_t pow2 = 1024;
  int octave = 0;
  while (pow2 * 2 < bytes) pow2 *= 2, ++octave;
  int quarter = static_cast<int>((bytes - pow2 + pow2 / 4 - 1) / (pow2 / 4));  // 1..4
  return {pow2 + pow2 / 4 * quarter, kSmallClasses + octave * 4 + quarter - 1};
}

struct State {
  std::mutex mutex;
  std::vector<void*> free_blocks[kClasses];
  AllocatorStats stats;
};

State& state() {
  static State* s = new State();  // never destroyed: tensors may die after static teardown
  return *s;
}

void free_cached_locked(State& s) {
  for (auto& blocks : s.free_blocks) {
    for (void* p : blocks) std::free(p);
    blocks.clear();
  }
  s.stats.cached = 0;
}

}  // namespace

CpuAllocator& CpuAllocator::get() {
  static CpuAllocator allocator;
  return allocator;
}

void* CpuAllocator::allocate(size_t bytes, size_t* granted) {
  State& s = state();
  auto [size, index] = size_class(bytes);
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<void*>& cached = s.free_blocks[index];
  void* ptr = nullptr;
  if (!cached.empty()) {
    ptr = cached.back();
    cached.pop_back();
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
  s.free_blocks[size_class(granted).index].push_back(ptr);
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
