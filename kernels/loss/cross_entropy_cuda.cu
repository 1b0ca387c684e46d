// CUDA cross-entropy: one block per row reads the row once (online max and sum of
// exponentials per thread, merged across the block), then one block reduces the row losses;
// the backward writes every logit's gradient in one elementwise pass. See cross_entropy.h.
#include <limits>

#include "kernels/common/block_reduce.cuh"
#include "flowgrad/base/device_error.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/loss/cross_entropy.h"

namespace fg {
namespace {

// Softmax statistics of part of a row: its max m and the sum of exp(x - m).
template <class T>
struct Stats {
  T m, s;
};

template <class T>
__device__ Stats<T> merge(Stats<T> a, Stats<T> b) {
  T m = b.m > a.m ? b.m : a.m;
  if (m == -std::numeric_limits<T>::infinity()) return {m, a.s + b.s};  // both empty so far
  return {m, a.s * fn::exp_any(a.m - m) + b.s * fn::exp_any(b.m - m)};
}

template <class T>
__device__ Stats<T> warp_merge(Stats<T> v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = merge(v, Stats<T>{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)});
  return v;
}

template <class T>
__device__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// A target that is neither ignore_index nor a class is reported and its row ignored.
__device__ bool row_ignored(int64_t t, const CrossEntropyArgs& a, IndexErrorSink sink) {
  if (t == a.ignore_index) return true;
  if (t >= 0 && t < a.classes) return false;
  report_bad_index(sink, IndexCheckOp::CrossEntropy, 1, t, a.classes);
  return true;
}

template <class T>
__global__ void forward_rows_kernel(const T* x,             // (rows, classes)
                                    const int64_t* target,  // (rows,)
                                    CrossEntropyArgs a, IndexErrorSink sink,
                                    T* row_loss,            // (rows,)
                                    T* lse) {               // (rows,)
  __shared__ T warp_m[kThreads / 32], warp_s[kThreads / 32], warp_x[kThreads / 32];
  int64_t r = blockIdx.x;
  const T* row = x + r * a.classes;
  Stats<T> st{-std::numeric_limits<T>::infinity(), T(0)};
  T sx = 0;
  for (int64_t j = threadIdx.x; j < a.classes; j += blockDim.x) {
    T v = row[j];
    sx += v;
    if (v == -std::numeric_limits<T>::infinity()) continue;  // adds exp(-inf) = 0
    if (v > st.m) {
      st.s = st.s * fn::exp_any(st.m - v) + T(1);
      st.m = v;
    } else {
      st.s += fn::exp_any(v - st.m);  // NaN lands here and poisons the sum, as it should
    }
  }
  st = warp_merge(st);
  sx = warp_sum(sx);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_m[warp] = st.m;
    warp_s[warp] = st.s;
    warp_x[warp] = sx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      st = merge(st, Stats<T>{warp_m[w], warp_s[w]});
      sx += warp_x[w];
    }
    T l = st.m + log(st.s);
    lse[r] = l;
    int64_t t = target[r];
    row_loss[r] = row_ignored(t, a, sink) ? T(0) : cross_entropy_row_loss(l, row[t], sx, a);
  }
}

// One block: loss[0] = sum (Sum) or mean over the rows not ignored (Mean); divisor[0] = count or 1.
template <class T>
__global__ void reduce_rows_kernel(const T* row_loss, const int64_t* target, CrossEntropyArgs a, bool mean,
                                   T* loss, T* divisor) {
  __shared__ double shared[kThreads];
  double total = 0, count = 0;
  for (int64_t r = threadIdx.x; r < a.rows; r += blockDim.x) {
    total += static_cast<double>(row_loss[r]);
    int64_t t = target[r];
    count += t != a.ignore_index && t >= 0 && t < a.classes;
  }
  total = block_combine(total, shared, SumOp{});
  count = block_combine(count, shared, SumOp{});
  if (threadIdx.x == 0) {
    divisor[0] = mean ? static_cast<T>(count) : T(1);
    loss[0] = static_cast<T>(mean ? total / count : total);
  }
}

template <class T>
__global__ void set_one_kernel(T* divisor) { divisor[0] = T(1); }

template <class T>
__global__ void backward_kernel(const T* x,             // (rows, classes)
                                const int64_t* target,  // (rows,)
                                const T* lse,           // (rows,)
                                const T* grad,          // (rows,) when per_row, else (1,)
                                bool per_row, const T* divisor, CrossEntropyArgs a,
                                T* out) {               // (rows, classes); overwritten
  int64_t total = a.rows * a.classes;
  FG_GRID_LOOP(p, total) {
    int64_t r = p / a.classes, j = p - r * a.classes;
    int64_t t = target[r];
    bool ignored = t == a.ignore_index || t < 0 || t >= a.classes;
    out[p] = ignored ? T(0) : cross_entropy_logit_grad(x[p], lse[r], j == t, grad[per_row ? r : 0] / divisor[0], a);
  }
}

}  // namespace

void cross_entropy_forward_cuda(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target, const CrossEntropyArgs& a,
                                LossReduce reduce, void* loss, void* lse, void* divisor, void* row_loss) {
  visit_float_dtype(dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    T* rows = reduce == LossReduce::None ? static_cast<T*>(loss) : static_cast<T*>(row_loss);
    if (a.rows > 0)
      forward_rows_kernel<T><<<grid_rows(a.rows, "cross_entropy"), kThreads, 0, kernel_stream(env)>>>(
          static_cast<const T*>(logits), target, a, index_error_sink(), rows, static_cast<T*>(lse));
    if (reduce == LossReduce::None)
      set_one_kernel<T><<<1, 1, 0, kernel_stream(env)>>>(static_cast<T*>(divisor));
    else
      reduce_rows_kernel<T><<<1, kThreads, 0, kernel_stream(env)>>>(rows, target, a, reduce == LossReduce::Mean, static_cast<T*>(loss),
                                             static_cast<T*>(divisor));
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward_cuda(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target, const void* lse,
                                 const void* grad, bool per_row, const void* divisor, const CrossEntropyArgs& a,
                                 void* grad_logits) {
  int64_t total = a.rows * a.classes;
  if (total == 0) return;
  visit_float_dtype(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<T><<<grid_for(total), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(logits), target, static_cast<const T*>(lse),
                                                      static_cast<const T*>(grad), per_row,
                                                      static_cast<const T*>(divisor), a, static_cast<T*>(grad_logits));
  });
  check_launch("cross_entropy_backward");
}

}  // namespace fg
