// Multi-tensor optimizer updates on CUDA: one launch per kMaxMultiTensors parameters. The
// item table (pointers, sizes, block ranges) is the kernel argument, so nothing is copied to
// the device and a captured CUDA graph replays it as is. Item k owns blocks
// [first_block[k], first_block[k + 1]) and walks its elements with a grid-stride loop over those
// blocks; Adam's per-item coefficients are computed once per block, exactly as the
// per-parameter kernel does (optim_cuda.cu), so the numbers match one launch per parameter.
#include <algorithm>
#include <cstdint>

#include "kernels/common/launch.cuh"
#include "kernels/optim/optim.h"

namespace fg {
namespace {

template <class Item>
struct Table {
  Item items[kMaxMultiTensors];
  int first_block[kMaxMultiTensors + 1];
  int count;
};
// Kernel arguments (the table and the hyper pointer) stay within CUDA's classic 4 KiB.
static_assert(sizeof(Table<AdamItem>) + sizeof(double*) <= 4096 && sizeof(Table<SgdItem>) + sizeof(double*) <= 4096);

// The item block b belongs to: the last k with first_block[k] <= b (a binary search).
template <class Item>
__device__ int item_of_block(const Table<Item>& t, int b) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_block[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

#define FG_ITEM_LOOP(i, t, k)                                                                          \
  const int64_t item_blocks = t.first_block[k + 1] - t.first_block[k];                                 \
  for (int64_t i = (blockIdx.x - t.first_block[k]) * static_cast<int64_t>(blockDim.x) + threadIdx.x; \
       i < t.items[k].n; i += item_blocks * blockDim.x)

template <class T>
__global__ void sgd_multi_kernel(const Table<SgdItem> t, const double* hyper) {  // each item: p, g, buf (n)
  const int k = item_of_block(t, blockIdx.x);
  const SgdCoeffs<T> c = sgd_coeffs<T>(hyper);
  T* p = static_cast<T*>(t.items[k].param);
  const T* g = static_cast<const T*>(t.items[k].grad);
  T* buf = static_cast<T*>(t.items[k].momentum_buf);
  FG_ITEM_LOOP(i, t, k) sgd_element<T>(p[i], g[i], buf ? buf + i : nullptr, c);
}

// Reads each step count before this update; increment_steps advances them afterwards.
template <class T>
__global__ void adam_multi_kernel(const Table<AdamItem> t, const double* hyper) {  // each item: p, g, m, v (n)
  const int k = item_of_block(t, blockIdx.x);
  __shared__ AdamCoeffs<T> c;
  if (threadIdx.x == 0) c = adam_coeffs<T>(hyper, *t.items[k].step + 1);
  __syncthreads();
  T* p = static_cast<T*>(t.items[k].param);
  const T* g = static_cast<const T*>(t.items[k].grad);
  T* m = static_cast<T*>(t.items[k].exp_avg);
  T* v = static_cast<T*>(t.items[k].exp_avg_sq);
  FG_ITEM_LOOP(i, t, k) adam_element<T>(p[i], g[i], m[i], v[i], c);
}

__global__ void increment_steps(const Table<AdamItem> t) {
  if (threadIdx.x < t.count) *t.items[threadIdx.x].step += 1;
}

// Fills the block ranges of items [0, count), count <= kMaxMultiTensors (each item gets grid_for(n)
// blocks, at least one so every item's block exists); returns the total block count.
template <class Item>
int plan_blocks(Table<Item>& t, const Item* items, int count) {
  t.count = count;
  t.first_block[0] = 0;
  for (int k = 0; k < count; ++k) {
    t.items[k] = items[k];
    t.first_block[k + 1] = t.first_block[k] + std::max(grid_for(items[k].n), 1);
  }
  return t.first_block[count];
}

// Calls launch(table, blocks) for each run of at most kMaxMultiTensors items, in order.
template <class Item, class Launch>
void for_tables(const Item* items, int count, const char* name, Launch&& launch) {
  FG_CHECK(count >= 1, Value, name, ": no parameters");
  for (int begin = 0; begin < count; begin += kMaxMultiTensors) {
    Table<Item> t;
    const int blocks = plan_blocks(t, items + begin, std::min(kMaxMultiTensors, count - begin));
    launch(t, blocks);
    check_launch(name);
  }
}

}  // namespace

void sgd_update_multi_cuda(const KernelEnv& env, DType dtype, const SgdItem* items, int count, const double* hyper) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    for_tables(items, count, "sgd_update_multi", [&](const Table<SgdItem>& t, int blocks) {
      sgd_multi_kernel<T><<<blocks, kThreads, 0, kernel_stream(env)>>>(t, hyper);
    });
  });
}

void adam_update_multi_cuda(const KernelEnv& env, DType dtype, const AdamItem* items, int count, const double* hyper) {
  visit_float_dtype(dtype, "optimizer", [&](auto tag) {
    using T = decltype(tag);
    for_tables(items, count, "adam_update_multi", [&](const Table<AdamItem>& t, int blocks) {
      adam_multi_kernel<T><<<blocks, kThreads, 0, kernel_stream(env)>>>(t, hyper);
      // Same stream: after every block of this table has read its step.
      increment_steps<<<1, kMaxMultiTensors, 0, kernel_stream(env)>>>(t);
    });
  });
}

}  // namespace fg
