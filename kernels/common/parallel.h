// parallel_for over an index range on the shared CPU pool (OpenMP). Small ranges stay on the
// calling thread. The body must not throw: kernels validate before they run.
#pragma once
#include <algorithm>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace fg {

// Ranges below this many elements of simple work are not worth waking threads for.
constexpr int64_t kParallelGrain = 32768;

template <class Body>
void parallel_for(int64_t n, int64_t grain, Body&& body) {
  if (n <= 0) return;
#if defined(_OPENMP)
  int threads = omp_get_max_threads();
  if (n > grain && threads > 1 && !omp_in_parallel()) {
    int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel num_threads(static_cast<int>(chunks))
    {
      int64_t t = omp_get_thread_num();
      int64_t begin = n * t / chunks, end = n * (t + 1) / chunks;
      if (begin < end) body(begin, end);
    }
    return;
  }
#endif
  body(int64_t{0}, n);
}

}  // namespace fg
