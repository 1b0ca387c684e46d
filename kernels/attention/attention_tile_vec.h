// Internal to the CPU attention tile (attention_tile_cpu.cpp): its 64-byte vector building blocks,
// the register-blocked product, lane reductions, the row log-sums, register transposes and row
// copies. Compiled per instruction set (cpu_dispatch.h); internal linkage, as attention_cpu_rows.h.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
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

// Where a product's (kRows, width) block goes: rows [0, rows) at c, ldc apart, columns [0, cols)
// (a partial last vector written lane by lane: an output's columns end at its row's end, where the
// packed layout's next head begins), row r times scale[r] when scale is given.
template <class T>
struct Dest {
  T* c;
  int64_t ldc, rows, cols;
  const T* scale = nullptr;
};
template <class T>
Dest<T> whole(T* c, int64_t ldc, int64_t width) { return {c, ldc, kRows, width}; }  // a scratch block

// The first n < kLane lanes of y into dst: out of line, so that the product's accumulators are
// never addressed lane by lane (which put them on the stack, zeroed by rep stos, at every call).
template <class T>
__attribute__((noinline)) void store_lanes(T* dst, const Vec<T>& y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = y[j];
}

// Block columns [n0, n0 + NV vectors) of C (kRows, .) = sum over k < K of A(r, k) * B(k, :),
// A(r, k) at a[r * a_row + k * a_k] (a row-major block or a transposed one), B's rows ldb apart,
// written (overwritten) into d.
template <class T, int NV>
inline __attribute__((always_inline)) void block_product(int64_t K, const T* __restrict a, int64_t a_row,
                                                         int64_t a_k, const T* __restrict b, int64_t ldb,
                                                         const Dest<T>& d, int64_t n0) {
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
  const Dest<T> at = d;  // in registers: the stores below may alias anything
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {  // unrolled: acc indexed by a variable would live on the stack
    if (r >= at.rows) break;
    T* row = at.c + r * at.ldc + n0;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      Vec<T> y = at.scale ? acc[r][v] * at.scale[r] : acc[r][v];
      int64_t left = at.cols - n0 - v * kLane<T>;
      if (left >= kLane<T>) *reinterpret_cast<Unaligned*>(row + v * kLane<T>) = y;
      else if (left > 0) store_lanes(row + v * kLane<T>, y, left);
    }
  }
}

// C (kRows, width) = A (kRows, K) B (K, width) into d, width a multiple of kLane: blocks two
// vectors wide (16 accumulators), one vector for the rest.
template <class T>
FG_CPU_CLONES void rows_product(int64_t K, const T* a, int64_t a_row, int64_t a_k, const T* b, int64_t ldb,
                                int64_t width, const Dest<T>& d) {
  int64_t n = 0;
  for (; n + 2 * kLane<T> <= width && n < d.cols; n += 2 * kLane<T>)
    block_product<T, 2>(K, a, a_row, a_k, b + n, ldb, d, n);
  if (n < width && n < d.cols) block_product<T, 1>(K, a, a_row, a_k, b + n, ldb, d, n);
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

// kRows vectors' lanes reduced at once, out[r] the max or sum of v[r]'s lanes: a tree of folds,
// each halving every row's lanes and packing two vectors' rows into one (7 folds of 3 operations
// for 8 rows, where one row at a time took 8 rows of a log2(lanes)-deep chain).
// Lane i of fold(a, b) over rows `w` lanes wide takes half i % (w / 2) of group i / (w / 2): a's
// groups first, then b's.
template <int n, int w>
constexpr int fold_lane(int i, bool upper) {
  int groups = n / w, g = i / (w / 2);
  return (g < groups ? 0 : n) + g % groups * w + (upper ? w / 2 : 0) + i % (w / 2);
}
template <Reduce op, class T, int w, std::size_t... I>
inline __attribute__((always_inline)) void fold(const Vec<T>& a, const Vec<T>& b, Vec<T>& out,
                                                std::index_sequence<I...>) {
  Vec<T> lo = __builtin_shufflevector(a, b, fold_lane<kLane<T>, w>(I, false)...);
  Vec<T> hi = __builtin_shufflevector(a, b, fold_lane<kLane<T>, w>(I, true)...);
  if constexpr (op == Reduce::Max) out = hi > lo ? hi : lo;
  else out = lo + hi;
}
template <Reduce op, class T>
inline __attribute__((always_inline)) void reduce_rows(const Vec<T> (&v)[kRows], T (&out)[kRows]) {
  static_assert(kRows == 8, "three levels of folds");
  constexpr int n = kLane<T>;
  auto lanes = std::make_index_sequence<n>{};
  Vec<T> two[4], four[2], all;
  for (int i = 0; i < 4; ++i) fold<op, T, n>(v[2 * i], v[2 * i + 1], two[i], lanes);
  for (int i = 0; i < 2; ++i) fold<op, T, n / 2>(two[2 * i], two[2 * i + 1], four[i], lanes);
  fold<op, T, n / 4>(four[0], four[1], all, lanes);  // row r in lanes [r n / 8, (r + 1) n / 8)
  if constexpr (n / 8 > 1) fold<op, T, n / 8>(Vec<T>(all), Vec<T>(all), all, lanes);
  for (int r = 0; r < kRows; ++r) out[r] = all[r];
}

// log x of a normal positive float32 (<= 1 ulp over all of them): Cephes' logf, x = m 2^e with m
// in [sqrt(1/2), sqrt(2)) and a polynomial in m - 1, without a libm call, so that loops over it
// vectorise.
inline float log_normal_f32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  int32_t e = static_cast<int32_t>(bits >> 23) - 126;  // x = f 2^e, f in [0.5, 1)
  bits = (bits & 0x007fffffu) | 0x3f000000u;
  float m;
  std::memcpy(&m, &bits, 4);
  bool low = m < 0.707106781186547524f;
  e -= low;
  m = low ? m + m - 1.0f : m - 1.0f;
  float z = m * m, y = 7.0376836292e-2f;
  for (float c : {-1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f, 1.4249322787e-1f, -1.6668057665e-1f,
                  2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f})
    y = y * m + c;
  float fe = static_cast<float>(e);
  y = y * m * z - 2.12194440e-4f * fe - 0.5f * z;
  return m + y + 0.693359375f * fe;
}
// The log of a block's row sums (>= 1 for a row with a key, 0 for a fully masked one, or NaN) at
// once: a libm call per row was 5% of the forward. Anything but a normal float32 through std::log.
template <class T>
FG_CPU_CLONES void log_rows(const T (&x)[kRows], T (&out)[kRows]) {
  if constexpr (std::is_same_v<T, float>) {
    for (int r = 0; r < kRows; ++r) out[r] = log_normal_f32(x[r]);
    for (int r = 0; r < kRows; ++r)
      if (!(x[r] >= FLT_MIN && x[r] <= FLT_MAX)) out[r] = std::log(x[r]);
  } else {
    for (int r = 0; r < kRows; ++r) out[r] = std::log(x[r]);
  }
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
