// Internal to the CPU attention tile (attention_tile_cpu.cpp): its 64-byte vector building blocks,
// the register-blocked product, lane reductions, register transposes and row copies. Compiled per
// instruction set (cpu_dispatch.h); internal linkage, as attention_cpu_rows.h.
#pragma once
#include <cstdint>
#include <utility>

#include "kernels/common/cpu_dispatch.h"

namespace fg {
namespace {

// One 64-byte vector of T (GCC/clang vector extension): one AVX-512 register in the avx512f clone.
// Explicit vectors keep the accumulators in registers: the auto-vectoriser vectorised the
// one-vector-wide variant along the inner dim instead (-fopt-info-vec).
// Loads and stores go through the unaligned, aliasing variant.
template <class T> struct VecOf;
template <> struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
  typedef float unaligned __attribute__((vector_size(64), aligned(4), may_alias));
  typedef int32_t index __attribute__((vector_size(64)));
};
template <> struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
  typedef double unaligned __attribute__((vector_size(64), aligned(8), may_alias));
  typedef int64_t index __attribute__((vector_size(64)));
};
template <class T> using Vec = typename VecOf<T>::type;
template <class T> constexpr int64_t kLane = 64 / sizeof(T);

constexpr int64_t kRows = 8;  // rows per micro-kernel block; every padded dim is a multiple of kLane >= 8

template <class T> int64_t padded(int64_t n) { return (n + kLane<T> - 1) / kLane<T> * kLane<T>; }

// C (kRows, NV vectors) = sum over k < K of A(r, k) * B(k, :), A(r, k) at a[r * a_row + k * a_k]
// (a row-major block or a transposed one), B's rows ldb apart. Overwrites C.
template <class T, int NV>
inline __attribute__((always_inline)) void block_product(int64_t K, const T* __restrict a, int64_t a_row,
                                                         int64_t a_k, const T* __restrict b, int64_t ldb,
                                                         T* __restrict c, int64_t ldc) {
  using Unaligned = typename VecOf<T>::unaligned;
  Vec<T> acc[kRows][NV] = {};
  for (int64_t k = 0; k < K; ++k) {
    Vec<T> bk[NV];
    for (int v = 0; v < NV; ++v) bk[v] = *reinterpret_cast<const Unaligned*>(b + k * ldb + v * kLane<T>);
    for (int r = 0; r < kRows; ++r) {
      T x = a[r * a_row + k * a_k];
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bk[v];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < NV; ++v) *reinterpret_cast<Unaligned*>(c + r * ldc + v * kLane<T>) = acc[r][v];
}

// C (kRows, width) = A (kRows, K) B (K, width), width a multiple of kLane: blocks two vectors wide
// (16 accumulators), one vector for the rest.
template <class T>
FG_CPU_CLONES void rows_product(int64_t K, const T* a, int64_t a_row, int64_t a_k, const T* b, int64_t ldb,
                                int64_t width, T* c, int64_t ldc) {
  int64_t n = 0;
  for (; n + 2 * kLane<T> <= width; n += 2 * kLane<T>)
    block_product<T, 2>(K, a, a_row, a_k, b + n, ldb, c + n, ldc);
  if (n < width) block_product<T, 1>(K, a, a_row, a_k, b + n, ldb, c + n, ldc);
}

// The max or the sum of a vector's lanes by halving with shuffles: a chain log2(lanes) operations
// deep in registers (lane-by-lane it was lanes deep, through the stack). By reference: a 64-byte
// vector by value draws GCC's ABI note.
enum class Reduce : uint8_t { Max, Sum };
template <class T, int N> struct VecN { typedef T type __attribute__((vector_size(N * sizeof(T)))); };
template <Reduce op, class T, int N, std::size_t... I>
inline __attribute__((always_inline)) T reduce_lanes(const typename VecN<T, N>::type& v, std::index_sequence<I...>) {
  if constexpr (N == 1) {
    return v[0];
  } else {
    typename VecN<T, N / 2>::type lo = __builtin_shufflevector(v, v, I...), hi = __builtin_shufflevector(v, v, (I + N / 2)...), r;
    if constexpr (op == Reduce::Max) r = hi > lo ? hi : lo;
    else r = lo + hi;
    return reduce_lanes<op, T, N / 2>(r, std::make_index_sequence<N / 4>{});
  }
}
template <class T>
inline __attribute__((always_inline)) T lanes_max(const Vec<T>& x) {
  return reduce_lanes<Reduce::Max, T, kLane<T>>(x, std::make_index_sequence<kLane<T> / 2>{});
}
template <class T>
inline __attribute__((always_inline)) T lanes_sum(const Vec<T>& x) {
  return reduce_lanes<Reduce::Sum, T, kLane<T>>(x, std::make_index_sequence<kLane<T> / 2>{});
}

// dst (rows, cols) = src, row r times scale[r] when scale is given (times 1 is exact): whole
// vectors, then a tail; inline, where a memmove call per short row cost more than its copy.
template <class T>
FG_CPU_CLONES void copy_rows(const T* __restrict src, int64_t lds, T* __restrict dst, int64_t ldd, int64_t rows,
                             int64_t cols, const T* __restrict scale = nullptr) {
  using Unaligned = typename VecOf<T>::unaligned;
  for (int64_t r = 0; r < rows; ++r, src += lds, dst += ldd) {
    T f = scale ? scale[r] : T(1);
    int64_t c = 0;
    for (; c + kLane<T> <= cols; c += kLane<T>)
      *reinterpret_cast<Unaligned*>(dst + c) = *reinterpret_cast<const Unaligned*>(src + c) * f;
    for (; c < cols; ++c) dst[c] = src[c] * f;
  }
}
// One stage of a kLane x kLane transpose in registers: rows i and i + b (i without bit b) swap
// their off-diagonal b-lane blocks, which exchanges bit b of the row index with bit b of the lane.
template <class T, int b, std::size_t... I>
inline __attribute__((always_inline)) void butterfly(Vec<T>* r, std::index_sequence<I...>) {
  constexpr int n = kLane<T>;
  for (int i = 0; i < n; ++i) {
    if (i & b) continue;
    Vec<T> x = r[i], y = r[i + b];
    r[i] = __builtin_shufflevector(x, y, ((I & b) ? n + I - b : I)...);
    r[i + b] = __builtin_shufflevector(x, y, ((I & b) ? n + I : I + b)...);
  }
}
// dst (cols, rows) = src (rows, cols) transposed, rows and cols multiples of kLane (padded
// buffers): kLane x kLane blocks through registers, log2(kLane) butterfly stages each.
template <class T>
FG_CPU_CLONES void transpose_padded(const T* __restrict src, int64_t lds, int64_t rows, int64_t cols, T* __restrict dst,
                                    int64_t ldd) {
  using Unaligned = typename VecOf<T>::unaligned;
  constexpr int n = kLane<T>;
  auto lanes = std::make_index_sequence<n>{};
  for (int64_t i0 = 0; i0 < rows; i0 += n)
    for (int64_t c0 = 0; c0 < cols; c0 += n) {
      Vec<T> r[n];
      for (int i = 0; i < n; ++i) r[i] = *reinterpret_cast<const Unaligned*>(src + (i0 + i) * lds + c0);
      butterfly<T, 1>(r, lanes), butterfly<T, 2>(r, lanes), butterfly<T, 4>(r, lanes);
      if constexpr (n == 16) butterfly<T, 8>(r, lanes);
      for (int i = 0; i < n; ++i) *reinterpret_cast<Unaligned*>(dst + (c0 + i) * ldd + i0) = r[i];
    }
}
}  // namespace
}  // namespace fg
