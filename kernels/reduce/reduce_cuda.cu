// CUDA reductions over the middle axis of a contiguous (outer, r, inner) block, with the CPU
// kernel's semantics. Many output lines: one thread per line runs the shared reduce_line
// (reads coalesce across `inner`). Float sums over a leading axis: column strips (reduce_columns).
// Long lines: one block per line, threads striding the line and combining partials in shared
// memory (sums in double; for Max/Min/Arg* the first NaN, else the extreme with the lowest index,
// wins, exactly as the sequential loop). Few very long lines (a full reduction is one line of
// every element): each line is cut into slices, one block each, and a second kernel combines the
// slices' partials in slice order, so the whole GPU reads it (review G4).
#include <cub/block/block_scan.cuh>

#include "flowgrad/core/tensor.h"
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

template <class T>
struct BestAt {
  T value;
  int64_t at;  // INT64_MAX: none (an empty slice)
};

// Combines one (value, index) per thread by the sequential rule; every thread gets the winner.
template <class T>
__device__ BestAt<T> combine_extremes(BestAt<T> mine, bool want_max, T* best, int64_t* where) {
  best[threadIdx.x] = mine.value;
  where[threadIdx.x] = mine.at;
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
  BestAt<T> winner{best[0], where[0]};
  __syncthreads();  // the buffers may be reused at once
  return winner;
}

// The sequential rule's extreme of line[k * stride] for k in [begin, end) and its index, combined
// over the block in shared memory (`best`, `where`: blockDim.x each); every thread gets it.
template <class T>
__device__ BestAt<T> block_extreme(const T* line, int64_t begin, int64_t end, int64_t stride, bool want_max, T* best,
                                   int64_t* where) {
  T b{};
  int64_t at = INT64_MAX;
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    T v = line[k * stride];
    if (at == INT64_MAX || first_is_better(v, k, b, at, want_max)) {
      b = v;
      at = k;
    }
  }
  return combine_extremes(BestAt<T>{b, at}, want_max, best, where);
}

// Integer sums in int64: exact in any order (two's complement wraps the same way), so the block
// adds them as a tree.
template <class T>
__device__ int64_t block_int_sum(const T* line, int64_t r, int64_t stride, int64_t* shared) {
  int64_t acc = 0;
  for (int64_t k = threadIdx.x; k < r; k += blockDim.x) acc = WrappingSumOp{}(acc, static_cast<int64_t>(line[k * stride]));
  return block_combine(acc, shared, WrappingSumOp{});
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
      } else {
        int64_t s = block_int_sum(base, r, inner, where);
        if (threadIdx.x == 0)
          out[line] = fn == ReduceFn::Mean ? static_cast<Out>(static_cast<double>(s) / static_cast<double>(r)) : static_cast<Out>(s);
      }
      return;
    }
    case ReduceFn::Var: {
      double mean = block_sum(base, r, inner, sums, [](double v) { return v; }) / static_cast<double>(r);
      double ss = block_sum(base, r, inner, sums, [mean](double v) { return (v - mean) * (v - mean); });
      if (threadIdx.x == 0) out[line] = static_cast<Out>(ss / reduce::var_divisor(r, correction));
      return;
    }
    case ReduceFn::LogSumExp: {  // the maximum by the sequential rule over the block, then a block sum
      double mx = static_cast<double>(block_extreme(base, 0, r, inner, true, best, where).value);
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
  BestAt<T> b = block_extreme(base, 0, r, inner, fn == ReduceFn::Max || fn == ReduceFn::ArgMax, best, where);
  if (threadIdx.x == 0)
    out[line] = fn == ReduceFn::ArgMax || fn == ReduceFn::ArgMin ? static_cast<Out>(b.at) : static_cast<Out>(b.value);
}

// Split lines (few and long; review G4): block (c, line) reduces slice c of the line, elements
// [c * slice, (c + 1) * slice), into partial c; combine_slices then reduces each line's partials
// in slice order. Sums: one double per slice; extremes: the slice's (value, index).
template <class T>
__global__ void reduce_slices(ReduceFn fn, const T* x, int64_t r, int64_t slice, int64_t slices, double* sums,
                              T* values, int64_t* indices) {
  __shared__ double shared[kBlock];
  __shared__ T best[kBlock];
  __shared__ int64_t where[kBlock];
  const int64_t line = blockIdx.y, c = blockIdx.x;
  const T* base = x + line * r;
  const int64_t begin = c * slice, end = begin + slice < r ? begin + slice : r;
  if (fn == ReduceFn::Sum || fn == ReduceFn::Mean) {
    double acc = 0;
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) acc += static_cast<double>(base[k]);
    double s = block_combine(acc, shared, SumOp{});
    if (threadIdx.x == 0) sums[line * slices + c] = s;
    return;
  }
  BestAt<T> b = block_extreme(base, begin, end, 1, fn == ReduceFn::Max || fn == ReduceFn::ArgMax, best, where);
  if (threadIdx.x == 0) {
    values[line * slices + c] = b.value;
    indices[line * slices + c] = b.at;
  }
}

template <class T, class Out>
__global__ void combine_slices(ReduceFn fn, int64_t r, int64_t slices, const double* sums, const T* values,
                               const int64_t* indices, Out* out) {
  __shared__ double shared[kBlock];
  __shared__ T best[kBlock];
  __shared__ int64_t where[kBlock];
  const int64_t line = blockIdx.x;
  if (fn == ReduceFn::Sum || fn == ReduceFn::Mean) {
    double acc = 0;
    for (int64_t c = threadIdx.x; c < slices; c += blockDim.x) acc += sums[line * slices + c];
    double s = block_combine(acc, shared, SumOp{});
    if (threadIdx.x == 0) out[line] = static_cast<Out>(fn == ReduceFn::Mean ? s / static_cast<double>(r) : s);
    return;
  }
  const bool want_max = fn == ReduceFn::Max || fn == ReduceFn::ArgMax;
  BestAt<T> mine{T{}, INT64_MAX};
  for (int64_t c = threadIdx.x; c < slices; c += blockDim.x) {
    BestAt<T> other{values[line * slices + c], indices[line * slices + c]};
    if (mine.at == INT64_MAX || first_is_better(other.value, other.at, mine.value, mine.at, want_max)) mine = other;
  }
  BestAt<T> b = combine_extremes(mine, want_max, best, where);
  if (threadIdx.x == 0)
    out[line] = fn == ReduceFn::ArgMax || fn == ReduceFn::ArgMin ? static_cast<Out>(b.at) : static_cast<Out>(b.value);
}

// Lines at least this long, when there are at most kSplitLines of them, are split into slices of
// at least kSliceMin elements, at most kMaxSlices per line.
constexpr int64_t kSplitMin = int64_t{1} << 16, kSplitLines = 64, kSliceMin = 8192, kMaxSlices = 1024;

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
      const bool split = inner == 1 && r >= kSplitMin && lines <= kSplitLines &&
                         ((fn == ReduceFn::Sum || fn == ReduceFn::Mean) ? std::is_floating_point_v<T>
                                                                        : fn != ReduceFn::Var && fn != ReduceFn::LogSumExp);
      if (split) {
        const int64_t slices = std::min(kMaxSlices, (r + kSliceMin - 1) / kSliceMin), slice = (r + slices - 1) / slices;
        const bool sums = fn == ReduceFn::Sum || fn == ReduceFn::Mean;
        const size_t each = sums ? sizeof(double) : sizeof(T) + sizeof(int64_t);
        int device = 0;
        cudaGetDevice(&device);  // the op's (run_op and plans select it)
        Tensor partials = Tensor::temporary(env, Dims{static_cast<int64_t>(lines * slices * each)}, DType::UInt8,
                                            Device{DeviceType::CUDA, device});
        char* p = static_cast<char*>(partials.data_ptr());
        double* sum_p = sums ? reinterpret_cast<double*>(p) : nullptr;
        int64_t* index_p = sums ? nullptr : reinterpret_cast<int64_t*>(p);
        T* value_p = sums ? nullptr : reinterpret_cast<T*>(p + lines * slices * sizeof(int64_t));
        reduce_slices<T><<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(lines)), kBlock, 0,
                           kernel_stream(env)>>>(fn, xs, r, slice, slices, sum_p, value_p, index_p);
        combine_slices<T, Out><<<static_cast<unsigned>(lines), kBlock, 0, kernel_stream(env)>>>(
            fn, r, slices, sum_p, value_p, index_p, ys);
      } else if (columns) {
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
// One thread per line (reads and writes coalesce across `inner`), for lines of at most one chunk
// and integer lines (reduce_line.h's order, so the CPU's bits).
template <class T>
__global__ void cumsum_lines(const T* x, int64_t lines, int64_t r, int64_t inner, reduce::CumOut<T>* y) {
  FG_GRID_LOOP(line, lines) {
    const int64_t at = line / inner * r * inner + line % inner;
    reduce::cumsum_chunk<T>(x + at, y + at, r, inner);
  }
}

// Longer float lines (review G6): one thread per chunk of every line, adjacent threads on adjacent
// lines (coalesced across `inner`), in three launches: the chunks' totals, each line's carries (an
// in-order scan of its totals), then every chunk's running sums from its carry; the CPU's order.
struct Chunks {
  int64_t lines, r, inner, count;
  __device__ int64_t at(int64_t t) const {  // chunk t / lines of line t % lines
    const int64_t line = t % lines;
    return line / inner * r * inner + line % inner + t / lines * reduce::kCumsumChunk * inner;
  }
  __device__ int64_t length(int64_t t) const {
    const int64_t rest = r - t / lines * reduce::kCumsumChunk;
    return rest < reduce::kCumsumChunk ? rest : reduce::kCumsumChunk;
  }
  __device__ int64_t slot(int64_t t) const { return t % lines * count + t / lines; }  // (lines, count)
};
template <class T>
__global__ void cumsum_chunk_totals(const T* x, Chunks c, double* totals) {
  FG_GRID_LOOP(t, c.lines * c.count) totals[c.slot(t)] = reduce::chunk_total<T>(x + c.at(t), c.length(t), c.inner);
}
__global__ void cumsum_carries(double* totals, Chunks c) {
  FG_GRID_LOOP(line, c.lines) reduce::carries_of(totals + line * c.count, c.count);
}
template <class T>
__global__ void cumsum_chunks(const T* x, Chunks c, const double* carries, T* y) {
  FG_GRID_LOOP(t, c.lines * c.count) {
    const int64_t at = c.at(t);
    reduce::cumsum_chunk<T>(x + at, y + at, c.length(t), c.inner, carries[c.slot(t)]);
  }
}

// Integer and bool lines (review G6): int64 sums are exact in any order, so one block scans a line
// tile by tile (CUB's block scan) and carries each tile's total into the next: the same values as
// the sequential loop, with the whole block reading the line.
template <class T>
__global__ void cumsum_int_blocks(const T* x, int64_t r, int64_t inner, int64_t* y) {
  using Scan = cub::BlockScan<int64_t, kBlock>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int64_t carry;
  const int64_t line = blockIdx.x, at = line / inner * r * inner + line % inner;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t start = 0; start < r; start += kBlock) {
    const int64_t k = start + threadIdx.x;
    int64_t v = k < r ? static_cast<int64_t>(x[at + k * inner]) : 0, total = 0;
    Scan(temp).InclusiveSum(v, v, total);
    if (k < r) y[at + k * inner] = WrappingSumOp{}(v, carry);
    __syncthreads();  // every thread has read `carry` and `temp` may be reused
    if (threadIdx.x == 0) carry = WrappingSumOp{}(carry, total);
    __syncthreads();
  }
}
}  // namespace

void cumsum_cuda(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t r, int64_t inner, void* y) {
  const int64_t lines = outer * inner;
  if (lines == 0 || r == 0) return;
  visit_compute_dtype(dtype, "cumsum", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<T>) {
      if (r >= kBlock && lines < (int64_t{1} << 16)) {
        cumsum_int_blocks<T><<<static_cast<unsigned>(lines), kBlock, 0, kernel_stream(env)>>>(
            static_cast<const T*>(x), r, inner, static_cast<int64_t*>(y));
        return;
      }
    }
    const int64_t chunks = std::is_floating_point_v<T> ? reduce::cumsum_chunks(r) : 1;
    if constexpr (std::is_floating_point_v<T>) {
      if (chunks > 1) {
        int device = 0;
        cudaGetDevice(&device);  // the op's (run_op and plans select it)
        Tensor totals = Tensor::temporary(env, Dims{lines * chunks}, DType::Float64, Device{DeviceType::CUDA, device});
        double* t = static_cast<double*>(totals.data_ptr());
        const Chunks c{lines, r, inner, chunks};
        const T* xs = static_cast<const T*>(x);
        cumsum_chunk_totals<T><<<grid_for(lines * chunks), kBlock, 0, kernel_stream(env)>>>(xs, c, t);
        cumsum_carries<<<grid_for(lines), kBlock, 0, kernel_stream(env)>>>(t, c);
        cumsum_chunks<T><<<grid_for(lines * chunks), kBlock, 0, kernel_stream(env)>>>(xs, c, t, static_cast<T*>(y));
        return;
      }
    }
    cumsum_lines<T><<<grid_for(lines), kBlock, 0, kernel_stream(env)>>>(static_cast<const T*>(x), lines, r, inner,
                                                                        static_cast<reduce::CumOut<T>*>(y));
  });
  check_launch("cumsum");
}

}  // namespace fg
