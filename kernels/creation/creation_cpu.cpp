#include "kernels/creation/creation.h"

#include "flowgrad/base/parallel.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/philox.h"

namespace fg {

void arange_cpu(const KernelEnv& env, DType dtype, double start, double step, int64_t n, void* out) {
  visit_compute_dtype(dtype, "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(arange_element(start, step, i));
    });
  });
}

void linspace_cpu(const KernelEnv& env, DType dtype, double start, double end, int64_t n, void* out) {
  visit_compute_dtype(dtype, "linspace", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(linspace_element(start, end, n, i));
  });
}

void eye_cpu(const KernelEnv& env, DType dtype, int64_t rows, int64_t cols, void* out) {
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    for (int64_t i = 0; i < rows * cols; ++i) p[i] = T(0.0f);
    for (int64_t i = 0; i < std::min(rows, cols); ++i) p[i * cols + i] = T(1.0f);
  });
}

namespace {
// Elements [b, e) of a random tensor, compiled per instruction set (cpu_dispatch.h): the normals'
// exact_log/exact_cos are chains of fma, a library call each in the baseline build. Every rounding
// in them is pinned, so each clone gives the same bits.
template <class T>
FG_CPU_KERNEL void random_run(T* p, RandomKind kind, uint64_t seed, uint64_t offset, int64_t b, int64_t e, int64_t low,
                              int64_t high) {
  for (int64_t i = b; i < e; ++i) p[i] = random_element<T>(kind, seed, offset, i, low, high);
}
}  // namespace

void random_cpu(const KernelEnv& env, RandomKind kind, DType dtype, PhiloxStart start, int64_t n, int64_t low,
                int64_t high, void* out) {
  const uint64_t seed = start.pair ? start.pair[0] : start.seed;
  const uint64_t offset = start.pair ? start.pair[1] + start.offset : start.offset;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out);
    parallel_for(n, 4096, [&](int64_t b, int64_t e) { FG_AT_ISA(random_run<T>(p, kind, seed, offset, b, e, low, high)); });
  });
}

void advance_philox_cpu(const KernelEnv& env, uint64_t* pair, uint64_t by) { pair[1] += by; }

void derive_philox_cpu(const KernelEnv&, const uint64_t* pair, uint64_t offset, uint64_t key, const int64_t* index,
                       uint64_t* out) {
  const uint64_t k = key + (index ? static_cast<uint64_t>(*index) : 0);
  out[0] = derived_seed(pair[0], pair[1] + offset, k);
  out[1] = 0;
}

}  // namespace fg
