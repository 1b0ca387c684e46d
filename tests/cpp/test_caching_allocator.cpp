// The CUDA caching allocator's policy over a fake backend: host memory with a byte budget, so
// that reuse, splitting, merging, per-stream pools, deferred reuse after record_stream (fake
// events), release-and-retry on out-of-memory and the statistics are checked on any machine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/caching_allocator.h"
#include "flowgrad/cuda/host_sync.h"

namespace fg::cuda {
namespace {

struct Fake {
  static inline size_t budget = 0, used = 0;
  static inline int calls = 0, frees = 0;
  static inline std::map<void*, size_t> sizes;
  static void* allocate(size_t bytes, int) {
    if (used + bytes > budget) return nullptr;
    void* p = std::malloc(bytes);
    used += bytes;
    sizes[p] = bytes;
    ++calls;
    return p;
  }
  static void release(void* p, int) {
    used -= sizes.at(p);
    sizes.erase(p);
    ++frees;
    std::free(p);
  }
  static void reset(size_t bytes) {
    budget = bytes;
    used = 0;
    calls = frees = 0;
  }
};

// Events of the fake backend: each remembers its stream; a test completes a stream's work by
// hand (finish), the way a GPU would finish what was queued on it.
struct FakeEvents {
  static inline std::map<uintptr_t, uintptr_t> stream_of;  // live event -> stream
  static inline std::map<uintptr_t, bool> done;
  static inline uintptr_t next = 1;
  static uintptr_t record(uintptr_t stream, int) {
    stream_of[next] = stream;
    done[next] = false;
    return next++;
  }
  static bool query(uintptr_t e) { return done.at(e); }
  static void destroy(uintptr_t e) {
    stream_of.erase(e);
    done.erase(e);
  }
  static void finish(uintptr_t stream) {
    for (auto& [e, s] : stream_of)
      if (s == stream) done[e] = true;
  }
};

constexpr size_t MiB = size_t{1} << 20;
RawBackend fake() {
  return {&Fake::allocate, &Fake::release, &FakeEvents::record, &FakeEvents::query, &FakeEvents::destroy};
}

TEST(CachingAllocator, RoundsAndReusesFreedBlocks) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  void* p = a.allocate(1000, 0);
  EXPECT_EQ(a.stats(0).allocated, 1024);
  EXPECT_EQ(a.stats(0).reserved, static_cast<int64_t>(2 * MiB));  // one small segment
  a.release(p);
  EXPECT_EQ(a.stats(0).allocated, 0);
  void* q = a.allocate(1000, 0);
  EXPECT_EQ(q, p);                 // the same block again
  EXPECT_EQ(Fake::calls, 1);       // no new backend call
  a.release(q);
}

TEST(CachingAllocator, SplitsSegmentsAndMergesNeighbours) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* x = a.allocate(4096, 0);
  void* y = a.allocate(4096, 0);
  void* z = a.allocate(4096, 0);
  EXPECT_EQ(static_cast<char*>(y) - static_cast<char*>(x), 4096);  // carved from one segment
  EXPECT_EQ(static_cast<char*>(z) - static_cast<char*>(y), 4096);
  EXPECT_EQ(Fake::calls, 1);
  a.release(x);
  a.release(z);
  a.release(y);  // merges with both neighbours: the whole segment is one free block again
  a.empty_cache();
  EXPECT_EQ(Fake::frees, 1);
  EXPECT_EQ(a.stats(0).reserved, 0);
  EXPECT_EQ(a.stats(0).segments, 0);
}

TEST(CachingAllocator, BestFitAndLargeSegments) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* big = a.allocate(3 * MiB, 0);
  EXPECT_EQ(a.stats(0).reserved, static_cast<int64_t>(4 * MiB));  // rounded to 2 MiB multiples
  a.release(big);
  void* smaller = a.allocate(2 * MiB + 512, 0);  // fits the freed 4 MiB block; the 1.5 MiB tail splits off
  EXPECT_EQ(smaller, big);
  void* tail = a.allocate(MiB + MiB / 2, 0);
  EXPECT_EQ(static_cast<char*>(tail), static_cast<char*>(big) + 2 * MiB + 512);
  EXPECT_EQ(Fake::calls, 1);
  a.release(smaller);
  a.release(tail);
}

TEST(CachingAllocator, StreamsHaveTheirOwnPools) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* p = a.allocate(4096, 0, /*stream=*/1);
  a.release(p);
  void* q = a.allocate(4096, 0, /*stream=*/2);
  EXPECT_NE(p, q);
  EXPECT_EQ(Fake::calls, 2);
  a.release(q);
}

TEST(CachingAllocator, RecordedStreamsDeferReuseUntilTheirWorkIsDone) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* x = a.allocate(4096, 0, /*stream=*/1);
  a.record_stream(x, 2);  // read on stream 2 as well
  a.record_stream(x, 2);  // recorded once
  a.record_stream(x, 1);  // its own stream: nothing to record
  a.release(x);
  EXPECT_EQ(FakeEvents::stream_of.size(), 1u);  // one event, on stream 2, at release
  EXPECT_EQ(a.stats(0).deferred_frees, 1);
  EXPECT_EQ(a.stats(0).allocated, 0);
  void* y = a.allocate(4096, 0, 1);
  EXPECT_NE(y, x);  // stream 2 may still read x
  FakeEvents::finish(2);
  void* z = a.allocate(4096, 0, 1);
  EXPECT_EQ(z, x);  // reused once stream 2's work at release time has finished
  EXPECT_EQ(a.stats(0).deferred_frees, 0);
  EXPECT_TRUE(FakeEvents::stream_of.empty());  // events destroyed after use
  a.release(y);
  a.release(z);
  EXPECT_EQ(a.stats(0).deferred_frees, 0);  // the record does not outlive the block
}

TEST(CachingAllocator, DeferredBlockWaitsForEveryRecordedStream) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* x = a.allocate(4096, 0, 1);
  a.record_stream(x, 2);
  a.record_stream(x, 3);
  a.release(x);
  FakeEvents::finish(2);
  void* y = a.allocate(4096, 0, 1);
  EXPECT_NE(y, x);  // stream 3 has not finished
  FakeEvents::finish(3);
  a.empty_cache();  // reclaims it (the segment stays: y lives in it)
  EXPECT_EQ(a.stats(0).deferred_frees, 0);
  void* z = a.allocate(4096, 0, 1);
  EXPECT_EQ(z, x);
  a.release(y);
  a.release(z);
}

TEST(CachingAllocator, ForgottenStreamRecordsNoEventAtRelease) {
  // A stream destroyed before a tensor recorded on it (review G2): its handle must never reach
  // cudaEventRecord; Stream's destructor synchronises it and has the allocator forget it.
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* x = a.allocate(4096, 0, 1);
  a.record_stream(x, 2);
  a.record_stream(x, 3);
  a.forget_stream(2);
  a.release(x);
  ASSERT_EQ(FakeEvents::stream_of.size(), 1u);  // stream 3's only
  EXPECT_EQ(FakeEvents::stream_of.begin()->second, 3u);
  FakeEvents::finish(3);
  void* y = a.allocate(4096, 0, 1);
  EXPECT_EQ(y, x);
  a.forget_stream(3);  // nothing recorded on it any more: harmless
  a.release(y);
  EXPECT_EQ(a.stats(0).deferred_frees, 0);
}

TEST(CachingAllocator, ForgottenStreamGivesBackItsFreeSegments) {
  // Review G11: a capture stream's workspace freed into a pool no later stream would use.
  Fake::reset(128 * MiB);
  CachingAllocator a(fake(), true);
  void* w = a.allocate(32 * MiB, 0, /*stream=*/7);
  void* kept = a.allocate(4096, 0, 7);
  void* other = a.allocate(32 * MiB, 0, 1);
  a.release(w);
  a.release(other);
  const int64_t reserved = a.stats(0).reserved;
  a.forget_stream(7);
  EXPECT_EQ(a.stats(0).reserved, reserved - static_cast<int64_t>(32 * MiB));  // w's segment only
  EXPECT_EQ(Fake::frees, 1);
  a.release(kept);  // its segment is still in use until now; empty_cache reclaims it like any other
  a.empty_cache();
  EXPECT_EQ(a.stats(0).reserved, 0);
}

TEST(CachingAllocator, ReleasesCacheAndRetriesBeforeOutOfMemory) {
  Fake::reset(6 * MiB);
  CachingAllocator a(fake(), true);
  void* p = a.allocate(4 * MiB, 0);
  a.release(p);                     // 4 MiB cached
  void* q = a.allocate(6 * MiB, 0);  // does not fit next to the cache: released, retried
  EXPECT_EQ(a.stats(0).retries, 1);
  EXPECT_EQ(a.stats(0).reserved, static_cast<int64_t>(6 * MiB));
  try {
    a.allocate(2 * MiB, 0);
    FAIL() << "expected OutOfMemoryError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
    std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0: out of memory allocating 2.0 MiB (allocated 6.0 MiB, reserved 6.0 MiB in 1 segments"),
              std::string::npos) << msg;
  }
  a.release(q);
}

TEST(CachingAllocator, PeakStatisticsAndReset) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), true);
  void* p = a.allocate(MiB * 3, 0);
  void* q = a.allocate(MiB, 0);
  a.release(p);
  EXPECT_EQ(a.stats(0).peak_allocated, static_cast<int64_t>(4 * MiB));
  a.reset_peak(0);
  EXPECT_EQ(a.stats(0).peak_allocated, static_cast<int64_t>(MiB));
  EXPECT_EQ(a.stats(1).allocated, 0);  // another device is untouched
  a.release(q);
}

TEST(CachingAllocator, WithoutCachingEveryRequestGoesToTheBackend) {
  Fake::reset(64 * MiB);
  CachingAllocator a(fake(), false);
  void* p = a.allocate(1000, 0);
  a.release(p);
  void* q = a.allocate(1000, 0);
  a.release(q);
  EXPECT_EQ(Fake::calls, 2);
  EXPECT_EQ(Fake::frees, 2);
  EXPECT_EQ(a.stats(0).reserved, 0);
  void* r = a.allocate(1000, 0, 1);
  a.record_stream(r, 2);  // the backend's free waits for the device: nothing to defer
  a.release(r);
  EXPECT_EQ(a.stats(0).deferred_frees, 0);
  EXPECT_EQ(Fake::frees, 3);
}

}  // namespace
TEST(DeferredErrors, DestructorFailuresAreRaisedAtTheNextCall) {
  // never_throwing keeps what a release throws; raise_deferred_errors raises the first, counts the
  // rest, then clears (review G2: no exception leaves a destructor).
  raise_deferred_errors();  // nothing kept: no exception
  never_throwing("freeing a block", [] { fail(ErrorKind::Device, "cudaFree: an illegal memory access"); });
  never_throwing("destroying a stream", [] { throw std::runtime_error("second"); });
  never_throwing("nothing wrong", [] {});
  try {
    raise_deferred_errors();
    FAIL() << "expected a DeviceError";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    std::string what = e.what();
    EXPECT_NE(what.find("freeing a block: cudaFree: an illegal memory access"), std::string::npos) << what;
    EXPECT_NE(what.find("and 1 more failure(s)"), std::string::npos) << what;
  }
  raise_deferred_errors();  // cleared
}

}  // namespace fg::cuda
