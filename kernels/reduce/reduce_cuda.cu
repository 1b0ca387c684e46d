// CUDA reductions over the middle axis of a contiguous (outer, r, inner) block, with the CPU
// kernel's semantics. Many output lines: one thread per line runs the shared reduce_line
// (reads coalesce across `inner`). Float sums over a leading axis: column strips (reduce_columns).
// Few long lines: one block per line, threads striding the
// line and combining partials in shared memory (sums in double; for Max/Min/Arg* the first
// NaN, else the extreme with the lowest index, wins, exactly as the sequential loop).
#include "kernels/common/launch.cuh"
#include "kernels/common/block_reduce.cuh"
#include "kernels/reduce/reduce_line.h"

namespace fg {
namespace {

constexpr int kBlock = kThreads;  // block-per-line kernels: a power of two for block_combine

template <class T, class Out>
__global__ void reduce_lines(ReduceFn fn, const T* x, int64_t lines, int64_t r, int64_t inner, Out* out,
                             double correction) {
  FG_GRID_LOOP(line, lines) {
    int64_t o = line / inner, j = line % inner;
    out[line] = reduce::reduce_line<T, Out>(fn, x + o * r * inner + j, r, inner, correction);
  }
}

// Sum of f(x[k]) over the block's line, combined in shared memory; every thread gets it.
template <class T, class F>
__device__ double block_sum(const T* line, int64_t r, int64_t stride, double* shared, F f) {
  double acc = 0;
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x) acc += f(static_cast<double>(line[k * stride]));
  return block_combine(acc, shared, SumOp{});
}

template <class T>
__device__ bool first_is_better(T a, int64_t ia, T b, int64_t ib, bool want_max) {
  bool an = reduce::nan_of(a), bn = reduce::nan_of(b);
  if (an || bn) return an && (!bn || ia < ib);
  if (a == b) return ia < ib;
  return want_max ? a > b : a < b;
}

template <class T, class Out>
__global__ void reduce_blocks(ReduceFn fn, const T* x, int64_t r, int64_t inner, Out* out, double correction) {
  __shared__ double sums[kBlock];
  __shared__ T best[kBlock];
  __shared__ int64_t where[kBlock];
  int64_t line = blockIdx.x, o = line / inner, j = line % inner;
  const T* base = x + o * r * inner + j;
  switch (fn) {
    case ReduceFn::Sum:
    case ReduceFn::Mean: {
      if constexpr (std::is_floating_point_v<T>) {
        double s = block_sum(base, r, inner, sums, [](double v) { return v; });
        if (threadIdx.x == 0) out[line] = static_cast<Out>(fn == ReduceFn::Mean ? s / static_cast<double>(r) : s);
      } else if (threadIdx.x == 0) {  // integer sums stay exact on one thread
        out[line] = reduce::reduce_line<T, Out>(fn, base, r, inner, correction);
      }
      return;
    }
    case ReduceFn::Var: {
      double mean = block_sum(base, r, inner, sums, [](double v) { return v; }) / static_cast<double>(r);
      double ss = block_sum(base, r, inner, sums, [mean](double v) { return (v - mean) * (v - mean); });
      if (threadIdx.x == 0) out[line] = static_cast<Out>(ss / reduce::var_divisor(r, correction));
      return;
    }
    case ReduceFn::LogSumExp: {  // the maximum by the sequential rule on one thread, then a block sum
      __shared__ double m;
      if (threadIdx.x == 0) m = static_cast<double>(reduce::reduce_line<T, Out>(ReduceFn::Max, base, r, inner, 0.0));
      __syncthreads();
      double mx = m;
      if (!(mx == INFINITY || mx == -INFINITY || mx != mx)) {
        double s = block_sum(base, r, inner, sums, [mx](double v) { return exp(v - mx); });
        if (threadIdx.x == 0) out[line] = static_cast<Out>(mx + log(s));
      } else if (threadIdx.x == 0) {
        out[line] = static_cast<Out>(mx);
      }
      return;
    }
    default: break;
  }
  bool want_max = fn == ReduceFn::Max || fn == ReduceFn::ArgMax;
  T b = base[0];
  int64_t at = 0;
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x) {
    T v = base[k * inner];
    if (k == threadIdx.x || first_is_better(v, k, b, at, want_max)) {
      b = v;
      at = k;
    }
  }
  bool has = threadIdx.x < r;
  best[threadIdx.x] = b;
  where[threadIdx.x] = has ? at : INT64_MAX;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && where[threadIdx.x + half] != INT64_MAX &&
        (where[threadIdx.x] == INT64_MAX ||
         first_is_better(best[threadIdx.x + half], where[threadIdx.x + half], best[threadIdx.x], where[threadIdx.x], want_max))) {
      best[threadIdx.x] = best[threadIdx.x + half];
      where[threadIdx.x] = where[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[line] = fn == ReduceFn::ArgMax || fn == ReduceFn::ArgMin ? static_cast<Out>(where[0]) : static_cast<Out>(best[0]);
}

// Sum/Mean over a leading axis (the bias-gradient shape, (rows, cols) summed over rows): a
// block covers a strip of kStrip adjacent columns (one warp row reads them coalesced), its
// kRowThreads rows of threads stride down the rows, then the partials are combined per column.
constexpr int kStrip = 32, kRowThreads = 32;

template <class T, class Out>
__global__ void reduce_columns(bool mean, const T* x,  // (outer, r, inner)
                               int64_t r, int64_t inner,
                               Out* out) {             // (outer, inner)
  __shared__ double partial[kRowThreads][kStrip + 1];
  int64_t o = blockIdx.y, j = blockIdx.x * static_cast<int64_t>(kStrip) + threadIdx.x;
  double acc = 0;
  if (j < inner) {
    const T* column = x + o * r * inner + j;
    for (int64_t k = threadIdx.y; k < r; k += kRowThreads) acc += static_cast<double>(column[k * inner]);
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < inner) {
    double s = 0;
    for (int y = 0; y < kRowThreads; ++y) s += partial[y][threadIdx.x];
    out[o * inner + j] = static_cast<Out>(mean ? s / static_cast<double>(r) : s);
  }
}

}  // namespace

void reduce_cuda(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t outer, int64_t r, int64_t inner,
                 void* out, double correction) {
  int64_t lines = outer * inner;
  if (lines == 0) return;
  visit_compute_dtype(in_dtype, "reduce", [&](auto in_tag) {
    visit_compute_dtype(out_dtype, "reduce", [&](auto out_tag) {
      using T = decltype(in_tag);
      using Out = decltype(out_tag);
      const T* xs = static_cast<const T*>(x);
      Out* ys = static_cast<Out*>(out);
      bool columns = (fn == ReduceFn::Sum || fn == ReduceFn::Mean) && std::is_floating_point_v<T> &&
                     inner >= kStrip && r >= kRowThreads && outer <= 65535;
      if (columns) {
        dim3 grid(static_cast<unsigned>((inner + kStrip - 1) / kStrip), static_cast<unsigned>(outer));
        reduce_columns<T, Out><<<grid, dim3(kStrip, kRowThreads), 0, kernel_stream(env)>>>(fn == ReduceFn::Mean, xs, r, inner, ys);
      } else if (lines >= 4096 || r < 256) {
        reduce_lines<T, Out><<<grid_for(lines), kBlock, 0, kernel_stream(env)>>>(fn, xs, lines, r, inner, ys, correction);
      } else {
        reduce_blocks<T, Out><<<grid_rows(lines, "reduce"), kBlock, 0, kernel_stream(env)>>>(fn, xs, r, inner, ys, correction);
      }
    });
  });
  check_launch("reduce");
}

namespace {
// One thread per line (reads and writes coalesce across `inner`); few long lines leave most of
// the GPU idle, which a block scan would not.
template <class T>
__global__ void cumsum_lines(const T* x, int64_t lines, int64_t r, int64_t inner, reduce::CumOut<T>* y) {
  FG_GRID_LOOP(line, lines) {
    const int64_t at = line / inner * r * inner + line % inner;
    reduce::cumsum_line<T>(x + at, y + at, r, inner);
  }
}
}  // namespace

void cumsum_cuda(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t r, int64_t inner, void* y) {
  const int64_t lines = outer * inner;
  if (lines == 0 || r == 0) return;
  visit_compute_dtype(dtype, "cumsum", [&](auto tag) {
    using T = decltype(tag);
    cumsum_lines<T><<<grid_for(lines), kBlock, 0, kernel_stream(env)>>>(static_cast<const T*>(x), lines, r, inner,
                                                                        static_cast<reduce::CumOut<T>*>(y));
  });
  check_launch("cumsum");
}

}  // namespace fg
