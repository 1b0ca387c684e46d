// CUDA creation kernels: fills with the CPU's value conversion and Philox random fills with the
// CPU's per-element function, so the same seed gives the same tensor on every device.
#include "kernels/common/launch.cuh"
#include "kernels/creation/creation.h"
#include "kernels/elementwise/elementwise_dispatch.h"

namespace fg {
namespace {

template <class T>
__global__ void fill_kernel(T* data, int64_t n, T value) {
  FG_GRID_LOOP(i, n) data[i] = value;
}

template <class T>
__global__ void random_kernel(RandomKind kind, uint64_t seed, uint64_t offset, int64_t n, int64_t low, int64_t high,
                              T* out) {
  FG_GRID_LOOP(i, n) out[i] = random_element<T>(kind, seed, offset, i, low, high);
}

// pair = {seed, base} in device memory: the same element as random_kernel with offset = base + delta.
template <class T>
__global__ void random_pair_kernel(RandomKind kind, const uint64_t* pair, uint64_t delta, int64_t n, int64_t low,
                                   int64_t high, T* out) {  // out: (n)
  const uint64_t seed = pair[0], offset = pair[1] + delta;
  FG_GRID_LOOP(i, n) out[i] = random_element<T>(kind, seed, offset, i, low, high);
}

__global__ void advance_pair(uint64_t* pair, uint64_t by) { pair[1] += by; }  // pair: (2)

__global__ void derive_pair(const uint64_t* pair, uint64_t offset, uint64_t key, const int64_t* index,
                            uint64_t* out) {  // pair, out: (2); index: () or null
  const uint64_t k = key + (index ? static_cast<uint64_t>(*index) : 0);
  out[0] = derived_seed(pair[0], pair[1] + offset, k);
  out[1] = 0;
}

template <class T>
__global__ void arange_kernel(double start, double step, int64_t n, T* out) {
  FG_GRID_LOOP(i, n) out[i] = static_cast<T>(arange_element(start, step, i));
}

template <class T>
__global__ void linspace_kernel(double start, double end, int64_t n, T* out) {
  FG_GRID_LOOP(i, n) out[i] = static_cast<T>(linspace_element(start, end, n, i));
}

template <class T>
__global__ void eye_kernel(int64_t rows, int64_t cols, T* out) {  // (rows, cols)
  FG_GRID_LOOP(p, rows * cols) out[p] = p / cols == p % cols ? T(1.0f) : T(0.0f);
}

}  // namespace

void advance_philox_cuda(const KernelEnv& env, uint64_t* pair, uint64_t by) {
  advance_pair<<<1, 1, 0, kernel_stream(env)>>>(pair, by);
  check_launch("philox_advance_");
}

void derive_philox_cuda(const KernelEnv& env, const uint64_t* pair, uint64_t offset, uint64_t key, const int64_t* index,
                        uint64_t* out) {
  derive_pair<<<1, 1, 0, kernel_stream(env)>>>(pair, offset, key, index, out);
  check_launch("philox_derive");
}

void arange_cuda(const KernelEnv& env, DType dtype, double start, double step, int64_t n, void* out) {
  if (n == 0) return;
  visit_compute_dtype(dtype, "arange", [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(start, step, n, static_cast<T*>(out));
  });
  check_launch("arange");
}

void linspace_cuda(const KernelEnv& env, DType dtype, double start, double end, int64_t n, void* out) {
  if (n == 0) return;
  visit_compute_dtype(dtype, "linspace", [&](auto tag) {
    using T = decltype(tag);
    linspace_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(start, end, n, static_cast<T*>(out));
  });
  check_launch("linspace");
}

void eye_cuda(const KernelEnv& env, DType dtype, int64_t rows, int64_t cols, void* out) {
  if (rows * cols == 0) return;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    eye_kernel<T><<<grid_for(rows * cols), kThreads, 0, kernel_stream(env)>>>(rows, cols, static_cast<T*>(out));
  });
  check_launch("eye");
}

void random_cuda(const KernelEnv& env, RandomKind kind, DType dtype, PhiloxStart start, int64_t n, int64_t low,
                 int64_t high, void* out) {
  if (n == 0) return;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) fail(ErrorKind::DType, "random fill on cuda: bool is not a random dtype");
    else if (start.pair)
      random_pair_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(kind, start.pair, start.offset, n, low,
                                                                          high, static_cast<T*>(out));
    else random_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(kind, start.seed, start.offset, n, low, high,
                                                                           static_cast<T*>(out));
  });
  check_launch("random fill");
}

void fill_cuda(const KernelEnv& env, DType dtype, void* data, int64_t n, double value) {
  if (n == 0) return;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(static_cast<T*>(data), n, elementwise::convert<T, double>(value));
  });
  check_launch("fill");
}

}  // namespace fg
