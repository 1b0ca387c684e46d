#include "kernels/reduce/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/lanes.h"
#include "kernels/common/workspace.h"
#include "kernels/reduce/reduce_line.h"

namespace fg {
namespace {

using reduce::Acc;

template <class Out, class A>
Out finish_sum(A acc, bool mean, int64_t r) {
  return mean ? static_cast<Out>(static_cast<double>(acc) / static_cast<double>(r)) : static_cast<Out>(acc);
}

// ---- Sum/Mean over the last axis (inner == 1): partial sums in lanes, so the loop vectorises ----
// float: four 16-float vectors added in float (a tree of three adds, exact for equal values), then
// into sixteen double lanes, so a long line keeps double's accuracy at a quarter of the
// conversions; other types: eight lanes of Acc<T>.
template <class T>
FG_CPU_KERNEL Acc<T> sum_line(const T* __restrict x, int64_t r) {
  int64_t k = 0;
  Acc<T> acc = 0;
  if constexpr (std::is_same_v<T, float>) {
    double partial[16] = {};
    for (; k + 64 <= r; k += 64)
      for (int j = 0; j < 16; ++j)
        partial[j] += static_cast<double>((x[k + j] + x[k + 16 + j]) + (x[k + 32 + j] + x[k + 48 + j]));
    acc = lane_total<16>(partial);
  } else {
    Acc<T> partial[8] = {};
    for (; k + 8 <= r; k += 8)
      for (int j = 0; j < 8; ++j) partial[j] += static_cast<Acc<T>>(x[k + j]);
    acc = lane_total<8>(partial);
  }
  for (; k < r; ++k) acc += static_cast<Acc<T>>(x[k]);
  return acc;
}

// ---- Sum/Mean over a leading axis (inner > 1), e.g. a bias gradient: (N, C) -> (C) ----
// Whole rows are added into a block of accumulators that stays in L1, which vectorises (per
// instruction set: cpu_dispatch.h). Tasks are (outer, column block, row part); when there are
// fewer column blocks than threads the rows are split too, and the parts are combined once.
constexpr int64_t kColumnBlock = 512;  // 4 KB of accumulators

template <class T>
FG_CPU_KERNEL void add_rows(Acc<T>* __restrict acc,  // (width), accumulated into
                            const T* __restrict x,    // (rows, width), rows `stride` elements apart
                            int64_t rows, int64_t stride, int64_t width) {
  int64_t k = 0;
  if constexpr (std::is_same_v<T, float>) {  // eight rows summed in float, then added in double
    for (; k + 8 <= rows; k += 8) {
      const T* r0 = x + k * stride;
      const int64_t s = stride;
      for (int64_t j = 0; j < width; ++j)
        acc[j] += static_cast<double>(((r0[j] + r0[j + s]) + (r0[j + 2 * s] + r0[j + 3 * s])) +
                                      ((r0[j + 4 * s] + r0[j + 5 * s]) + (r0[j + 6 * s] + r0[j + 7 * s])));
    }
  }
  for (; k < rows; ++k) {
    const T* row = x + k * stride;
    for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<Acc<T>>(row[j]);
  }
}

template <class T, class Out>
void sum_columns(bool mean, const T* x, int64_t outer, int64_t r, int64_t inner, Out* out) {
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const bool large = outer * r * inner > kParallelGrain / 4;  // a (1024, 128) bias gradient: two threads
  int64_t parts = 1;
  if (large && outer * blocks < pool_threads()) parts = std::min<int64_t>(pool_threads(), r);
  std::vector<Acc<T>> partial(parts > 1 ? parts * outer * inner : 0);  // (parts, outer, inner)
  parallel_for(outer * blocks * parts, large ? 1 : outer * blocks * parts, [&](int64_t t0, int64_t t1) {
    Acc<T> acc[kColumnBlock];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t part = t % parts, block = t / parts % blocks, o = t / parts / blocks;
      const int64_t j0 = block * kColumnBlock, width = std::min(kColumnBlock, inner - j0);
      const int64_t k0 = r * part / parts, k1 = r * (part + 1) / parts;
      std::fill(acc, acc + width, Acc<T>(0));
      FG_AT_ISA(add_rows(acc, x + (o * r + k0) * inner + j0, k1 - k0, inner, width));
      if (parts > 1) {
        std::copy(acc, acc + width, partial.data() + (part * outer + o) * inner + j0);
      } else {
        for (int64_t j = 0; j < width; ++j) out[o * inner + j0 + j] = finish_sum<Out>(acc[j], mean, r);
      }
    }
  });
  if (parts == 1) return;
  for (int64_t i = 0; i < outer * inner; ++i) {
    Acc<T> v = 0;
    for (int64_t p = 0; p < parts; ++p) v += partial[p * outer * inner + i];
    out[i] = finish_sum<Out>(v, mean, r);
  }
}

}  // namespace

void add_rows_cpu(double* acc, const float* x, int64_t rows, int64_t stride, int64_t width) {
  FG_AT_ISA(add_rows(acc, x, rows, stride, width));
}
void add_rows_cpu(double* acc, const double* x, int64_t rows, int64_t stride, int64_t width) {
  FG_AT_ISA(add_rows(acc, x, rows, stride, width));
}

void reduce_cpu(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t outer,
                int64_t r, int64_t inner, void* out, double correction) {
  visit_compute_dtype(in_dtype, "reduce", [&](auto in_tag) {
    visit_compute_dtype(out_dtype, "reduce", [&](auto out_tag) {
      using T = decltype(in_tag);
      using Out = decltype(out_tag);
      const T* xs = static_cast<const T*>(x);
      Out* ys = static_cast<Out*>(out);
      const bool mean = fn == ReduceFn::Mean;
      if ((fn == ReduceFn::Sum || mean) && inner > 1) {
        sum_columns<T, Out>(mean, xs, outer, r, inner, ys);
        return;
      }
      if (fn == ReduceFn::Sum || mean) {
        parallel_for(outer, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
          for (int64_t line = begin; line < end; ++line) ys[line] = finish_sum<Out>(FG_AT_ISA(sum_line(xs + line * r, r)), mean, r);
        });
        return;
      }
      parallel_for(outer * inner, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) {
          int64_t o = line / inner, j = line % inner;
          ys[line] = reduce::reduce_line<T, Out>(fn, xs + o * r * inner + j, r, inner, correction);
        }
      });
    });
  });
}

void sum_ends_cpu(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t r1,
                  int64_t kept, int64_t r2, void* out) {
  visit_compute_dtype(in_dtype, "reduce", [&](auto in_tag) {
    visit_compute_dtype(out_dtype, "reduce", [&](auto out_tag) {
      using T = decltype(in_tag);
      using Out = decltype(out_tag);
      const T* xs = static_cast<const T*>(x);
      std::vector<Acc<T>> lines(static_cast<size_t>(r1 * kept));  // (r1, kept)
      parallel_for(r1 * kept, kParallelGrain / (r2 + 1) + 1, [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) lines[line] = FG_AT_ISA(sum_line(xs + line * r2, r2));
      });
      Out* ys = static_cast<Out*>(out);
      for (int64_t k = 0; k < kept; ++k) {
        Acc<T> total = 0;
        for (int64_t i = 0; i < r1; ++i) total += lines[i * kept + k];
        ys[k] = finish_sum<Out>(total, fn == ReduceFn::Mean, r1 * r2);
      }
    });
  });
}

void cumsum_cpu(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t r, int64_t inner, void* y) {
  visit_compute_dtype(dtype, "cumsum", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    auto* ys = static_cast<reduce::CumOut<T>*>(y);
    const int64_t lines = outer * inner;
    auto line_at = [&](int64_t line) { return line / inner * r * inner + line % inner; };
    const int64_t chunks = std::is_floating_point_v<T> ? reduce::cumsum_chunks(r) : 1;
    if (chunks <= 1) {
      parallel_for(lines, kParallelGrain / (r + 1) + 1, [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) reduce::cumsum_chunk<T>(xs + line_at(line), ys + line_at(line), r, inner);
      });
      return;
    }
    if constexpr (std::is_floating_point_v<T>) {  // chunk totals, their carries, then the chunks (reduce_line.h)
      constexpr int64_t C = reduce::kCumsumChunk;
      CpuWorkspace workspace(env, static_cast<size_t>(lines * chunks) * sizeof(double));
      double* totals = static_cast<double*>(workspace.data());
      auto over_chunks = [&](auto&& fn) {
        parallel_for(lines * chunks, kParallelGrain / C + 1, [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t c = t % chunks, at = line_at(t / chunks) + c * C * inner;
            fn(t, at, std::min(C, r - c * C));
          }
        });
      };
      over_chunks([&](int64_t t, int64_t at, int64_t n) { totals[t] = reduce::chunk_total<T>(xs + at, n, inner); });
      parallel_for(lines, kParallelGrain / (chunks + 1) + 1, [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) reduce::carries_of(totals + line * chunks, chunks);
      });
      over_chunks([&](int64_t t, int64_t at, int64_t n) { reduce::cumsum_chunk<T>(xs + at, ys + at, n, inner, totals[t]); });
    }
  });
}

}  // namespace fg
