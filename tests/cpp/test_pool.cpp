// flowgrad's CPU pool (base/parallel.cpp) under regions started back to back: every task of every
// region runs exactly once, and no region waits forever. Regions of 1 to 7 tasks whose tasks return
// at once follow one another from C++, so a worker is often still leaving one region when the next
// starts: the pool once let such a worker take an index of the next region before its counters
// were set (a task run twice, or never counted: the caller then waited forever). That pool hung in
// one of four runs of 100 000 regions here; a watchdog turns a hang into a failure.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "flowgrad/core/runtime.h"

namespace fg {
namespace {

class Pool : public ::testing::Test {
 protected:
  void SetUp() override { previous_ = num_threads(); }
  void TearDown() override { set_num_threads(previous_); }
  int previous_ = 1;
};

// Ends the process with a message if not destroyed within `seconds`: a pool that hangs cannot be
// unwound, so the test reports it and exits instead of waiting for the runner's timeout.
class Watchdog {
 public:
  explicit Watchdog(int seconds)
      : thread_([this, seconds] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!done_cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
            std::fprintf(stderr, "test_pool: the pool hung (a region never finished within %d s)\n", seconds);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

TEST_F(Pool, BackToBackRegionsRunEveryTaskOnce) {
  Watchdog watchdog(60);
  // Two threads that only spin: more runnable threads than cores, so the scheduler preempts the
  // caller and the workers at arbitrary points, inside the pool's handovers too.
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 2; ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    constexpr int kRegions = 300000, kMost = 7;
    std::vector<std::atomic<int>> runs(kRegions * kMost);  // every task of every region, counted
    for (int region = 0; region < kRegions; ++region) {  // back to back: checked only at the end
      std::atomic<int>* mine = runs.data() + region * kMost;
      parallel_for(1 + region % kMost, 1, [mine](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) mine[i].fetch_add(1);
      });
    }
    for (int region = 0; region < kRegions; ++region)
      for (int i = 0; i < kMost; ++i)
        ASSERT_EQ(runs[region * kMost + i].load(), i < 1 + region % kMost ? 1 : 0)
            << threads << " threads, region " << region << ", task " << i;
  }
  stop = true;
  for (auto& t : spinners) t.join();
}

TEST_F(Pool, RegionsFromOneThreadAfterAnotherShareThePool) {
  set_num_threads(2);
  std::atomic<int64_t> total{0};
  auto regions = [&] {
    for (int region = 0; region < 5000; ++region)
      parallel_for(4, 1, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  };
  std::thread other(regions);
  regions();
  other.join();
  EXPECT_EQ(total.load(), 2 * 5000 * 4);
}

}  // namespace
}  // namespace fg
