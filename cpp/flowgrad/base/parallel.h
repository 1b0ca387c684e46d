// parallel_for over an index range on flowgrad's CPU thread pool, which also runs the jobs of
// OpenBLAS's threaded calls (BlasThreads below). Idle workers spin briefly, then block. Small ranges
// stay on the calling thread, and so does a parallel_for issued from inside another one. The body
// must not throw: kernels validate before they run.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace fg {

// Ranges below this many elements of simple work are not worth waking threads for.
constexpr int64_t kParallelGrain = 1 << 17;

int pool_threads();               // threads a parallel_for may use, the caller included
void set_pool_threads(int n);     // n >= 1
bool in_parallel_region();

// Where OpenBLAS runs the jobs of a threaded call. Pool: on this pool's workers and the calling
// thread (OpenBLAS >= 0.3.28's threads callback), so one set of threads serves both and OpenBLAS's
// own never wake; OpenBlas: on OpenBLAS's own threads, which spin for a while after each call.
enum class BlasThreads { Pool, OpenBlas };
// Returns where the jobs run from now on: OpenBlas also when the BLAS cannot hand them over (MKL,
// BLIS, an older OpenBLAS). Call it while no BLAS call runs (at start-up).
BlasThreads set_blas_threads(BlasThreads where);
BlasThreads blas_threads();

namespace detail {
// Runs task(ctx, i) for i in [0, tasks) on the pool and the calling thread; returns when all ran.
void run_tasks(int tasks, void (*task)(void*, int), void* ctx);
}  // namespace detail

template <class Body>
void parallel_for(int64_t n, int64_t grain, Body&& body) {
  if (n <= 0) return;
  int threads = pool_threads();
  if (n <= grain || threads <= 1 || in_parallel_region()) {
    body(int64_t{0}, n);
    return;
  }
  struct Ctx {
    std::remove_reference_t<Body>* body;
    int64_t n;
    int chunks;
  } ctx{&body, n, static_cast<int>(std::min<int64_t>(threads, (n + grain - 1) / grain))};
  detail::run_tasks(ctx.chunks, [](void* p, int i) {
    auto* c = static_cast<Ctx*>(p);
    int64_t begin = c->n * i / c->chunks, end = c->n * (i + 1) / c->chunks;
    if (begin < end) (*c->body)(begin, end);
  }, &ctx);
}

// While alive, BLAS runs single-threaded (its calls then run inline on the calling thread), so
// work spread over this pool (small matrices of a batch, attention tiles, graph branches) does not
// wake BLAS threads for each call (nor, with BlasThreads::Pool, start threads for the jobs of a
// call made inside a region, where the pool's workers are taken). Restores the previous count on destruction. OpenBLAS's thread
// count is process-wide (openblas_set_num_threads), so this is a process-wide scope, not a field
// of the per-thread ExecContext. Does nothing with a BLAS other than OpenBLAS.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_;
};

}  // namespace fg
