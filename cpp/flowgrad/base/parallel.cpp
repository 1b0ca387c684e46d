// The CPU thread pool behind parallel_for: workers take task indices from an atomic counter, and
// the caller works too. Between regions a worker spins for a while (kSpin, 1 ms, yielding the core
// now and then) before it sleeps on a condition variable, and the caller spins likewise before it
// waits for the last task. Ops come back to back, with Python or host work between them, and waking
// a sleeping worker can take longer than a region's task on a VM (its core idles): the caller then
// ran every task itself. With 50 us of spin an eager MLP step at batch 64 took 1.8 ms, with 1 ms 1.13.
// With BlasThreads::Pool, large GEMMs are cut into single-threaded BLAS calls run on these workers
// (kernels/linalg/gemm_cpu.cpp), and OpenBLAS's own threads stay asleep.
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
    bool sleepers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = task;
      ctx_ = ctx;
      tasks_ = tasks;
      next_.store(0);
      pending_.store(tasks);
      generation_.fetch_add(1, std::memory_order_release);
      sleepers = sleeping_ > 0;
    }
    if (sleepers) wake_.notify_all();  // spinning workers see the new generation themselves
    std::vector<std::thread> helpers;
    for (int i = 0; i < extra; ++i) helpers.emplace_back([this] { t_in_region = true; drain(); });
    t_in_region = true;
    drain();
    t_in_region = false;
    for (auto& h : helpers) h.join();
    if (spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_.load() == 0; });
  }

 private:
  void drain() {
    for (int i = next_.fetch_add(1); i < tasks_; i = next_.fetch_add(1)) {
      task_(ctx_, i);
      if (pending_.fetch_sub(1) == 1) {
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
      drain();
    }
  }

  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  int sleeping_ = 0;  // workers waiting on wake_ (guarded by mutex_)
  void (*task_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  int tasks_ = 0;
  std::atomic<int> next_{0}, pending_{0};
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

BlasThreads g_blas_threads = BlasThreads::OpenBlas;

}  // namespace

int pool_threads() { return pool().threads(); }
void set_pool_threads(int n) {
  if (n != pool().threads()) pool().resize(n);
  if (openblas_set_num_threads) openblas_set_num_threads(g_blas_threads == BlasThreads::Pool ? 1 : n);
}
bool in_parallel_region() { return t_in_region; }

// On the pool, OpenBLAS itself always runs single-threaded: its server threads, which spin for a
// while after each job they run, then never get one (and so sleep for good).
BlasThreads set_blas_threads(BlasThreads where) {
  if (!openblas_set_num_threads) return g_blas_threads;  // BlasThreads::OpenBlas
  g_blas_threads = where;
  openblas_set_num_threads(where == BlasThreads::Pool ? 1 : pool().threads());
  return where;
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
