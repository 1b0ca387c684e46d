// CUDA gather, scatter_add, index_select and index_put over contiguous (outer, d, inner) blocks, with the
// CPU kernels' layouts. Indices arrive validated and wrapped to [0, d). scatter_add
// accumulates with atomics, so with repeated indices float sums may differ from the CPU in the
// last bits (the order of additions is not fixed).
#include <type_traits>

#include "kernels/common/launch.cuh"
#include "kernels/index/index.h"

namespace fg {
namespace {

// gather (each output element has its own index) and index_select (one index per position
// along d, shared by the whole slice): out[o, i, j] = x[o, index, j].
template <class T>
__global__ void take_kernel(const T* x, const int64_t* idx, bool per_slice, int64_t d, int64_t n, int64_t inner,
                            int64_t total, T* out) {
  FG_GRID_LOOP(p, total) {
    int64_t o = p / (n * inner), j = p % inner;
    int64_t k = per_slice ? idx[(p / inner) % n] : idx[p];
    out[p] = x[(o * d + k) * inner + j];
  }
}

__device__ void atomic_add(float* dst, float v) { atomicAdd(dst, v); }
__device__ void atomic_add(double* dst, double v) { atomicAdd(dst, v); }
__device__ void atomic_add(int32_t* dst, int32_t v) { atomicAdd(dst, v); }
__device__ void atomic_add(int64_t* dst, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(v));  // two's complement
}
// 8- and 16-bit integers have no atomicAdd: compare-and-swap on the aligned 32-bit word that
// holds them, changing only their bytes (the sum wraps like the CPU's).
template <class T>
__device__ void atomic_add_narrow(T* dst, T v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "narrow integers only");
  using Bits = std::make_unsigned_t<T>;
  uintptr_t addr = reinterpret_cast<uintptr_t>(dst);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
  unsigned int shift = static_cast<unsigned int>(addr & 3) * 8;
  unsigned int mask = ((1u << (sizeof(T) * 8)) - 1u) << shift;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    T current = static_cast<T>(static_cast<Bits>((assumed & mask) >> shift));
    unsigned int sum = static_cast<Bits>(static_cast<T>(current + v));
    old = atomicCAS(word, assumed, (assumed & ~mask) | (sum << shift));
  } while (assumed != old);
}
__device__ void atomic_add(uint8_t* dst, uint8_t v) { atomic_add_narrow(dst, v); }
__device__ void atomic_add(int8_t* dst, int8_t v) { atomic_add_narrow(dst, v); }
__device__ void atomic_add(int16_t* dst, int16_t v) { atomic_add_narrow(dst, v); }

template <class T>
__global__ void scatter_add_kernel(const T* src, const int64_t* idx, int64_t d, int64_t n, int64_t inner,
                                   int64_t total, T* out) {
  FG_GRID_LOOP(p, total) {
    int64_t o = p / (n * inner), j = p % inner;
    atomic_add(out + (o * d + idx[p]) * inner + j, src[p]);
  }
}

// out[idx[i]] = src[i] for elements of one width (W: an unsigned integer of the item size).
template <class W>
__global__ void put_kernel(const W* src, const int64_t* idx, int64_t k, W* out) {
  FG_GRID_LOOP(i, k) { out[idx[i]] = src[i]; }
}

template <class W>
void put(const KernelEnv& env, const void* src, const int64_t* idx, int64_t k, void* out) {
  put_kernel<W><<<grid_for(k), kThreads, 0, kernel_stream(env)>>>(static_cast<const W*>(src), idx, k, static_cast<W*>(out));
}

void take(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, bool per_slice, int64_t outer, int64_t d, int64_t n,
          int64_t inner, void* out, const char* what) {
  int64_t total = outer * n * inner;
  if (total == 0) return;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    take_kernel<T><<<grid_for(total), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(x), idx, per_slice, d, n, inner, total,
                                                      static_cast<T*>(out));
  });
  check_launch(what);
}

}  // namespace

void gather_cuda(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d, int64_t n, int64_t inner,
                 void* out) {
  take(env, dtype, x, idx, false, outer, d, n, inner, out, "gather");
}

void scatter_add_cuda(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer, int64_t d, int64_t n,
                      int64_t inner, void* out) {
  int64_t total = outer * n * inner;
  if (total == 0) return;
  visit_compute_dtype(dtype, "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      fail(ErrorKind::DType, "scatter_add on cuda: bool tensors are not supported");
    } else {
      scatter_add_kernel<T><<<grid_for(total), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(src), idx, d, n, inner, total,
                                                               static_cast<T*>(out));
    }
  });
  check_launch("scatter_add");
}

void index_put_cuda(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t k, void* out) {
  if (k == 0) return;
  switch (itemsize(dtype)) {
    case 1: put<uint8_t>(env, src, idx, k, out); break;
    case 2: put<uint16_t>(env, src, idx, k, out); break;
    case 4: put<uint32_t>(env, src, idx, k, out); break;
    default: put<uint64_t>(env, src, idx, k, out); break;
  }
  check_launch("index_put_");
}

void index_select_cuda(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d, int64_t n,
                       int64_t inner, void* out) {
  take(env, dtype, x, idx, true, outer, d, n, inner, out, "index_select");
}

}  // namespace fg
