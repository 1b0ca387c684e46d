// CUDA index_add by sorted runs (no atomics, deterministic) and the device-side index check.
#include <cub/device/device_radix_sort.cuh>

#include "flowgrad/base/device_error.cuh"
#include "flowgrad/cuda/stream.h"  // LibraryKernels
#include "kernels/common/launch.cuh"
#include "kernels/index/index_add.h"

namespace fg {
namespace {

using Key = unsigned long long;  // validated indices are non-negative: unsigned order is theirs

__global__ void wrap_index_kernel(const int64_t* idx, // (n,)
                                  int64_t n, int64_t size, IndexCheckOp op, int dim, IndexErrorSink sink,
                                  int64_t* out) { // (n,)
  FG_GRID_LOOP(i, n) {
    int64_t v = idx[i];
    bool ok = v >= -size && v < size;
    if (!ok) report_bad_index(sink, op, dim, v, size);
    out[i] = !ok ? 0 : v < 0 ? v + size : v;
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  FG_GRID_LOOP(i, n) out[i] = static_cast<int32_t>(i);
}

// One block per run of equal sorted indices (and outer slice): the block's threads stride over
// the row, each adding the run's source rows in index order into its column. Accumulates.
template <class T>
__global__ void add_runs_kernel(const T* src,         // (outer, n, inner)
                                const Key* sorted,    // (n,) the index, sorted
                                const int32_t* order, // (n,) the position each sorted entry came from
                                int64_t outer, int64_t d, int64_t n, int64_t inner,
                                T* out) {             // (outer, d, inner)
  for (int64_t b = blockIdx.x; b < outer * n; b += gridDim.x) {  // block-uniform
    int64_t o = b / n, s = b % n;
    Key row = sorted[s];
    if (s > 0 && sorted[s - 1] == row) continue;  // not the start of a run
    T* dst = out + (o * d + static_cast<int64_t>(row)) * inner;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) {
      T acc = dst[j];
      for (int64_t k = s; k < n && sorted[k] == row; ++k) {
        T v = src[(o * n + order[k]) * inner + j];
        if constexpr (std::is_same_v<T, bool>) acc = acc || v;
        else acc += v;
      }
      dst[j] = acc;
    }
  }
}

int key_bits(int64_t d) {  // radix-sort only the bits an index in [0, d) can have
  int bits = 1;
  while (bits < 64 && (int64_t{1} << bits) < d) ++bits;
  return bits;
}

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_temp_bytes(const KernelEnv& env, int64_t n, int64_t d) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<int>(n), 0, key_bits(d), library_stream(env));
  return bytes;
}

}  // namespace

int64_t index_add_cuda_workspace(const KernelEnv& env, int64_t n, int64_t d) {
  FG_CHECK(n <= INT32_MAX, Value, "index_add on cuda: an index of ", n, " entries exceeds one sort");
  return static_cast<int64_t>(align(n * sizeof(Key)) + 2 * align(n * sizeof(int32_t)) + sort_temp_bytes(env, n, d));
}

void index_add_cuda(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer, int64_t d, int64_t n,
                    int64_t inner, void* out, void* workspace) {
  if (outer * n * inner == 0) return;
  char* w = static_cast<char*>(workspace);
  Key* sorted = reinterpret_cast<Key*>(w);
  int32_t* positions = reinterpret_cast<int32_t*>(w + align(n * sizeof(Key)));
  int32_t* order = positions + align(n * sizeof(int32_t)) / sizeof(int32_t);
  void* temp = w + align(n * sizeof(Key)) + 2 * align(n * sizeof(int32_t));
  size_t temp_bytes = sort_temp_bytes(env, n, d);
  iota_kernel<<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(positions, n);
  cudaError_t err;
  {
    cuda::LibraryKernels library(env.stream);
    err = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, reinterpret_cast<const Key*>(idx), sorted, positions,
                                          order, static_cast<int>(n), 0, key_bits(d), library_stream(env));
  }
  FG_CHECK(err == cudaSuccess, Device, "index_add on cuda: radix sort failed: ", cudaGetErrorString(err));
  int threads = inner >= kThreads ? kThreads : static_cast<int>((inner + 31) / 32 * 32);
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outer * n, int64_t{1} << 20));
  visit_compute_dtype(dtype, "index_add", [&](auto tag) {
    using T = decltype(tag);
    add_runs_kernel<T><<<blocks, threads, 0, kernel_stream(env)>>>(static_cast<const T*>(src), sorted, order, outer, d, n, inner,
                                            static_cast<T*>(out));
  });
  check_launch("index_add");
}

void wrap_index_cuda(const KernelEnv& env, const int64_t* idx, int64_t n, int64_t size, IndexCheckOp op, int dim, int64_t* out) {
  if (n == 0) return;
  wrap_index_kernel<<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(idx, n, size, op, dim,
                                               index_error_sink(), out);
  check_launch(index_check_op_name(op));
}

}  // namespace fg
