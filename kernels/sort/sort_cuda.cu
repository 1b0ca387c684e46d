// CUDA sort/topk (two CUB radix sorts), nonzero (CUB scan) and one_hot. See sort.h.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <type_traits>

#include "flowgrad/cuda/stream.h"  // LibraryKernels
#include "kernels/common/block_reduce.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/sort/sort.h"

namespace fg {
namespace {

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// An unsigned key whose order is the CPU sort's order of T (NaN largest, -0.0 == +0.0).
template <class T>
using KeyOf = std::conditional_t<sizeof(T) == 8, unsigned long long, unsigned int>;

template <class T>
__device__ KeyOf<T> sort_key(T v) {
  using K = KeyOf<T>;
  constexpr K sign = K{1} << (sizeof(K) * 8 - 1);
  if constexpr (std::is_floating_point_v<T>) {
    if (v != v) return ~K{0};        // every NaN: above +inf
    if (v == T(0)) v = T(0);         // -0.0 sorts with +0.0
    K bits;
    memcpy(&bits, &v, sizeof(K));
    return bits & sign ? ~bits : bits | sign;
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<K>(static_cast<std::conditional_t<sizeof(T) == 8, long long, int>>(v)) ^ sign;
  } else {
    return static_cast<K>(v);
  }
}

// The items of x (outer, d, inner) as lines (lines, d): keys (order-preserving) and item numbers.
template <class T>
__global__ void make_keys_kernel(const T* x, int64_t d, int64_t inner, int64_t lines, bool descending,
                                 KeyOf<T>* keys, int32_t* items) {  // (lines, d), (lines, d)
  FG_GRID_LOOP(p, lines * d) {
    int64_t line = p / d, j = p % d, o = line / inner, i = line % inner;
    KeyOf<T> key = sort_key(x[(o * d + j) * inner + i]);
    keys[p] = descending ? ~key : key;  // stable ascending on inverted keys keeps ties in order
    items[p] = static_cast<int32_t>(p);
  }
}

// The line of each item, in the key order of the first pass: the second pass's keys.
__global__ void line_keys_kernel(const int32_t* items, int64_t n, int64_t d, unsigned* lines) {  // (n,), (n,)
  FG_GRID_LOOP(p, n) lines[p] = static_cast<unsigned>(items[p] / d);
}

template <class T>
__global__ void take_sorted_kernel(const T* x, const int32_t* order, int64_t d, int64_t inner, int64_t k,
                                   int64_t total, T* values, int64_t* indices) {  // (outer, k, inner)
  FG_GRID_LOOP(p, total) {
    int64_t i = p % inner, r = p / inner % k, o = p / (inner * k);
    int64_t j = order[(o * inner + i) * d + r] % d;  // item numbers: line * d + position
    values[p] = x[(o * d + j) * inner + i];
    indices[p] = j;
  }
}

// Bits that hold every line number below `lines` (at least 1: CUB sorts a non-empty bit range).
int line_bits(int64_t lines) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < lines) ++bits;
  return bits;
}

template <class K>
size_t radix_temp_bytes(const KernelEnv& env, int64_t items) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<int>(items), 0, static_cast<int>(sizeof(K) * 8), library_stream(env));
  return bytes;
}

// Sections of the sort workspace: keys in/out, item numbers in/out, line keys in/out, CUB's temp
// storage (shared by both passes).
struct SortLayout {
  size_t keys, items, lines, temp;
  template <class K>
  static SortLayout of(const KernelEnv& env, int64_t lines, int64_t d) {
    size_t n = static_cast<size_t>(lines * d);
    return {align(n * sizeof(K)), align(n * sizeof(int32_t)), align(n * sizeof(unsigned)),
            std::max(radix_temp_bytes<K>(env, lines * d), radix_temp_bytes<unsigned>(env, lines * d))};
  }
  size_t total() const { return 2 * keys + 2 * items + 2 * lines + temp; }
};

void check_sort(cudaError_t err) {
  FG_CHECK(err == cudaSuccess, Device, "sort on cuda: radix sort failed: ", cudaGetErrorString(err));
}

template <class Fn>
decltype(auto) visit_sortable(DType dtype, Fn&& fn) {
  FG_CHECK(dtype != DType::Bool, DType, "sort: not defined for bool tensors");
  return visit_compute_dtype(dtype, "sort", [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), bool>) return fn(uint8_t{});  // not reached
    else return fn(tag);
  });
}

__global__ void count_true_kernel(const bool* mask, int64_t n, unsigned long long* count) {
  __shared__ double shared[kThreads];
  double local = 0;
  FG_GRID_LOOP(i, n) local += mask[i];
  double block = block_combine(local, shared, SumOp{});
  if (threadIdx.x == 0 && block > 0) atomicAdd(count, static_cast<unsigned long long>(block));
}

__global__ void mask_to_flags_kernel(const bool* mask, int64_t n, int64_t* flags) {
  FG_GRID_LOOP(i, n) flags[i] = mask[i];
}

struct Shape {
  int64_t dims[16];
};

__global__ void write_coords_kernel(const bool* mask, const int64_t* rows, int64_t n, Shape shape, int ndim,
                                    int64_t* coords) {  // (count, ndim)
  FG_GRID_LOOP(i, n) {
    if (!mask[i]) continue;
    int64_t rest = i;
    for (int d = ndim - 1; d >= 0; --d) {
      coords[rows[i] * ndim + d] = rest % shape.dims[d];
      rest /= shape.dims[d];
    }
  }
}

__global__ void one_hot_kernel(const int64_t* idx, int64_t total, int64_t classes, int64_t* out) {
  FG_GRID_LOOP(p, total) out[p] = idx[p / classes] == p % classes;
}

}  // namespace

int64_t sort_cuda_workspace(const KernelEnv& env, DType dtype, int64_t lines, int64_t d) {
  FG_CHECK(lines * d <= INT32_MAX, Value, "sort on cuda: ", lines * d, " elements exceed one radix sort");
  return visit_sortable(dtype, [&](auto tag) {
    return static_cast<int64_t>(SortLayout::of<KeyOf<decltype(tag)>>(env, lines, d).total());
  });
}

void sort_cuda(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t d, int64_t inner, int64_t k, bool descending,
               void* values, int64_t* indices, void* workspace) {
  int64_t lines = outer * inner, total = outer * k * inner;
  if (total == 0) return;
  visit_sortable(dtype, [&](auto tag) {
    using T = decltype(tag);
    using K = KeyOf<T>;
    SortLayout s = SortLayout::of<K>(env, lines, d);
    char* w = static_cast<char*>(workspace);
    K* keys_in = reinterpret_cast<K*>(w);
    K* keys_out = reinterpret_cast<K*>(w + s.keys);
    int32_t* items_in = reinterpret_cast<int32_t*>(w + 2 * s.keys);
    int32_t* items_out = reinterpret_cast<int32_t*>(w + 2 * s.keys + s.items);
    unsigned* lines_in = reinterpret_cast<unsigned*>(w + 2 * s.keys + 2 * s.items);
    unsigned* lines_out = reinterpret_cast<unsigned*>(w + 2 * s.keys + 2 * s.items + s.lines);
    void* temp = w + 2 * s.keys + 2 * s.items + 2 * s.lines;
    int n = static_cast<int>(lines * d);
    make_keys_kernel<T><<<grid_for(lines * d), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(x), d, inner, lines, descending,
                                                            keys_in, items_in);
    // Two stable LSD passes make one (line, key) order: all items by key, then by line. Unlike
    // cub::DeviceSegmentedSort (which reads segment sizes back on the host past ~300 lines),
    // neither pass synchronises with the host, so a sort can be captured in a CUDA graph.
    size_t temp_bytes = s.temp;
    {
      cuda::LibraryKernels library(env.stream);  // CUB's kernels, for the capture launch count
      check_sort(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, items_in, items_out, n, 0,
                                                 static_cast<int>(sizeof(K) * 8), library_stream(env)));
    }
    line_keys_kernel<<<grid_for(lines * d), kThreads, 0, kernel_stream(env)>>>(items_out, lines * d, d, lines_in);
    temp_bytes = s.temp;
    {
      cuda::LibraryKernels library(env.stream);
      check_sort(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, lines_in, lines_out, items_out, items_in, n, 0,
                                                 line_bits(lines), library_stream(env)));
    }
    take_sorted_kernel<T><<<grid_for(total), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(x), items_in, d, inner, k, total,
                                                          static_cast<T*>(values), indices);
  });
  check_launch("sort");
}

void count_true_cuda(const KernelEnv& env, const bool* mask, int64_t n, int64_t* count) {
  cudaError_t err = cudaMemsetAsync(count, 0, sizeof(int64_t), library_stream(env));
  FG_CHECK(err == cudaSuccess, Device, "nonzero on cuda: clearing the count failed: ", cudaGetErrorString(err));
  if (n > 0)
    count_true_kernel<<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(mask, n, reinterpret_cast<unsigned long long*>(count));
  check_launch("nonzero");
}

int64_t nonzero_cuda_workspace(const KernelEnv& env, int64_t n) {
  FG_CHECK(n <= INT32_MAX, Value, "nonzero on cuda: ", n, " elements exceed one scan");
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                static_cast<int>(n), library_stream(env));
  return static_cast<int64_t>(2 * align(n * sizeof(int64_t)) + bytes);
}

void nonzero_cuda(const KernelEnv& env, const bool* mask, const int64_t* shape, int ndim, int64_t* coords, void* workspace) {
  FG_CHECK(ndim <= 16, Shape, "nonzero on cuda: at most 16 dims, got ", ndim);
  Shape s{};
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= s.dims[d] = shape[d];
  if (n == 0) return;
  char* w = static_cast<char*>(workspace);
  int64_t* flags = reinterpret_cast<int64_t*>(w);
  int64_t* rows = reinterpret_cast<int64_t*>(w + align(n * sizeof(int64_t)));
  void* temp = w + 2 * align(n * sizeof(int64_t));
  size_t temp_bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, flags, rows, static_cast<int>(n), library_stream(env));
  mask_to_flags_kernel<<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(mask, n, flags);
  cudaError_t err;
  {
    cuda::LibraryKernels library(env.stream);
    err = cub::DeviceScan::ExclusiveSum(temp, temp_bytes, flags, rows, static_cast<int>(n), library_stream(env));
  }
  FG_CHECK(err == cudaSuccess, Device, "nonzero on cuda: scan failed: ", cudaGetErrorString(err));
  write_coords_kernel<<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(mask, rows, n, s, ndim, coords);
  check_launch("nonzero");
}

void one_hot_cuda(const KernelEnv& env, const int64_t* idx, int64_t n, int64_t classes, int64_t* out) {
  if (n * classes == 0) return;
  one_hot_kernel<<<grid_for(n * classes), kThreads, 0, kernel_stream(env)>>>(idx, n * classes, classes, out);
  check_launch("one_hot");
}

}  // namespace fg
