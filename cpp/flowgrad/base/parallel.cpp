// The CPU thread pool behind parallel_for: workers take task indices from an atomic counter, and
// the caller works too. Between regions a worker spins for a while (kSpin, 1 ms, yielding the core
// now and then) before it sleeps on a condition variable, and the caller spins likewise before it
// waits for the last task: ops come back to back, with Python or host work between them, and on a
// VM waking a sleeping worker (its core idle) can take longer than a region's task; an OpenBLAS job
// then waits for it. With 50 us, back-to-back 1024x512x128 GEMMs took 401-590 us (single-threaded:
// 780), with 1 ms 394-401 (one process each, alternating, 2026-11-24).
// OpenBLAS's threaded calls run their jobs on the same workers (run_blas_jobs below). A region's
// index and task counters live in the caller's frame, and the caller returns only once no worker
// is inside it: a worker still leaving one region can never take an index of the next.
#include "flowgrad/base/parallel.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

// Provided by OpenBLAS; absent (null) with other BLAS libraries.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads() __attribute__((weak));
// OpenBLAS >= 0.3.28 (driver/others/blas_server.c, exec_blas): a threaded call hands its jobs to
// this callback instead of its own threads; job i runs as dojob(i, jobdata + i * jobdata_size, arg).
using BlasDojob = void (*)(int job, void* jobdata, int arg);
using BlasThreadsCallback = void (*)(int sync, BlasDojob dojob, int jobs, size_t jobdata_size, void* jobdata, int arg);
extern "C" void openblas_set_threads_callback_function(BlasThreadsCallback) __attribute__((weak));

namespace fg {
namespace {

thread_local bool t_in_region = false;

class Pool {
 public:
  ~Pool() { resize(1); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
  }

  // Tasks that wait for one another need `min_threads` = tasks: threads the pool lacks join this run.
  void run(int tasks, void (*task)(void*, int), void* ctx, int min_threads = 1) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);  // one region at a time
    const int extra = std::max(0, min_threads - threads());
    Region region{task, ctx, tasks};
    region.pending.store(tasks);
    bool sleepers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_.store(&region);
      generation_.fetch_add(1, std::memory_order_release);
      sleepers = sleeping_ > 0;
    }
    if (sleepers) wake_.notify_all();  // spinning workers see the new generation themselves
    std::vector<std::thread> helpers;
    for (int i = 0; i < extra; ++i) helpers.emplace_back([this, &region] { t_in_region = true; drain(region); });
    t_in_region = true;
    drain(region);
    t_in_region = false;
    for (auto& h : helpers) h.join();
    if (!spin_until([&] { return region.pending.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return region.pending.load() == 0; });
    }
    // The region lives in this frame: no worker may still be in it (about to take an index, or to
    // signal done_) when the next region starts. A worker counts itself busy before it looks for
    // the current region, so once it is cleared and no one is busy, none can reach this one.
    current_.store(nullptr);
    while (busy_.load() != 0) std::this_thread::yield();
  }

 private:
  // One parallel region: its tasks and the counters of the indices taken and the tasks finished.
  struct Region {
    void (*task)(void*, int);
    void* ctx;
    int tasks;
    std::atomic<int> next{0}, pending{0};
  };

  void drain(Region& r) {
    for (int i = r.next.fetch_add(1); i < r.tasks; i = r.next.fetch_add(1)) {
      r.task(r.ctx, i);
      if (r.pending.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_all();
      }
    }
  }

  // Spins until done() or for kSpin, yielding the core now and then; true when done() held.
  template <class Done>
  static bool spin_until(const Done& done) {
    constexpr auto kSpin = std::chrono::milliseconds(1);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 1;; ++i) {
      if (done()) return true;
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() - start > kSpin) return false;
        std::this_thread::yield();
      }
    }
  }

  void work() {
    pthread_setname_np(pthread_self(), "flowgrad-pool");  // how perf and /proc tell them from BLAS's
    t_in_region = true;
    uint64_t seen = 0;
    while (true) {
      auto started = [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(started)) {
        std::unique_lock<std::mutex> lock(mutex_);
        ++sleeping_;
        wake_.wait(lock, started);
        --sleeping_;
      }
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      busy_.fetch_add(1);
      if (Region* r = current_.load()) drain(*r);
      busy_.fetch_sub(1);
    }
  }

  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  int sleeping_ = 0;  // workers waiting on wake_ (guarded by mutex_)
  std::atomic<Region*> current_{nullptr};  // the region running now, null between regions
  std::atomic<int> busy_{0};               // workers between looking for a region and leaving it
};

// Never destroyed: worker threads must not outlive static teardown. A forked child has none of its
// parent's workers, and the pool's mutexes may be held there by threads that no longer exist, so the
// child leaves the parent's pool alone and its first parallel call starts a pool of the same size.
std::atomic<Pool*> g_pool{nullptr};
int g_pool_size = 1;  // the size a new pool starts with

Pool& new_pool() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (g_pool.load() == nullptr) {
    static const int forks_handled = pthread_atfork(nullptr, nullptr, [] {
      if (Pool* parent = g_pool.exchange(nullptr)) g_pool_size = parent->threads();
    });
    (void)forks_handled;
    auto* p = new Pool();
    p->resize(g_pool_size);
    g_pool.store(p);
  }
  return *g_pool.load();
}

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  return p ? *p : new_pool();
}

// OpenBLAS's jobs synchronise with one another, so all of them must run at once. Job i also uses
// OpenBLAS's global buffer i: two threaded calls must never overlap. On the pool, its one-region-
// at-a-time lock keeps them apart; inside a region (a parallel_for body calling BLAS without
// SingleThreadedBlas) the pool is taken, so the jobs get threads of their own, one call at a time.
struct BlasJobs {
  BlasDojob dojob;
  char* data;
  size_t size;
  int arg;
  static void run(void* p, int i) {
    auto* jobs = static_cast<BlasJobs*>(p);
    jobs->dojob(i, jobs->data + i * jobs->size, jobs->arg);
  }
};

void run_blas_jobs(int, BlasDojob dojob, int count, size_t size, void* data, int arg) {
  BlasJobs jobs{dojob, static_cast<char*>(data), size, arg};
  if (count == 1) return BlasJobs::run(&jobs, 0);
  if (!in_parallel_region()) return pool().run(count, &BlasJobs::run, &jobs, count);
  static std::mutex nested;
  std::lock_guard<std::mutex> lock(nested);
  std::vector<std::thread> threads;
  for (int i = 1; i < count; ++i) threads.emplace_back(&BlasJobs::run, &jobs, i);
  BlasJobs::run(&jobs, 0);
  for (auto& t : threads) t.join();
}

BlasThreads g_blas_threads = BlasThreads::OpenBlas;

}  // namespace

int pool_threads() { return pool().threads(); }
void set_pool_threads(int n) {
  if (n != pool().threads()) pool().resize(n);
}
bool in_parallel_region() { return t_in_region; }

BlasThreads set_blas_threads(BlasThreads where) {
  if (!openblas_set_threads_callback_function) return g_blas_threads;  // BlasThreads::OpenBlas
  openblas_set_threads_callback_function(where == BlasThreads::Pool ? &run_blas_jobs : nullptr);
  return g_blas_threads = where;
}
BlasThreads blas_threads() { return g_blas_threads; }

SingleThreadedBlas::SingleThreadedBlas() : previous_(openblas_get_num_threads ? openblas_get_num_threads() : 1) {
  if (openblas_set_num_threads && previous_ != 1) openblas_set_num_threads(1);
}
SingleThreadedBlas::~SingleThreadedBlas() {
  if (openblas_set_num_threads && previous_ != 1) openblas_set_num_threads(previous_);
}

namespace detail {
void run_tasks(int tasks, void (*task)(void*, int), void* ctx) { pool().run(tasks, task, ctx); }
}  // namespace detail

}  // namespace fg
