// Internal to the CPU attention tile (attention_tile_cpu.cpp): its vector building blocks, the
// register-blocked product, lane reductions, the row log-sums, register transposes and row copies,
// each for vectors of W bytes, one register of the instruction-set level it is compiled for
// (cpu_dispatch.h: 64 at avx512, 32 at avx2, 16 at generic): a vector wider than the registers is
// split by the compiler, and its shuffles went through the stack lane by lane. Internal linkage,
// as attention_cpu_rows.h.
#pragma once
#include <cfloat>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/vec.h"

namespace fg {
namespace {

constexpr int64_t kRows = 8;  // rows per micro-kernel block
// Every padded dim is a multiple of kPad: whole vectors, and whole blocks of rows.
template <class T, int W> constexpr int64_t kPad = kLane<T, W> > kRows ? kLane<T, W> : kRows;
template <class T, int W> int64_t padded(int64_t n) { return (n + kPad<T, W> - 1) / kPad<T, W> * kPad<T, W>; }

// Where a product's (kRows, width) block goes: rows [0, rows) at c, ldc apart, columns [0, cols)
// (a partial last vector written lane by lane: an output's columns end at its row's end, where the
// packed layout's next head begins), row r times scale[r] when scale is given; Into::Add adds it
// to what is there (whole vectors only: a padded buffer's block, cols a multiple of kLane).
enum class Into : uint8_t { Overwrite, Add };
template <class T>
struct Dest {
  T* c;
  int64_t ldc, rows, cols;
  const T* scale = nullptr;
  Into into = Into::Overwrite;
};
template <class T>
Dest<T> whole(T* c, int64_t ldc, int64_t width) { return {c, ldc, kRows, width}; }  // a scratch block

// The first n < kLane lanes of y into dst: out of line, so that the product's accumulators are
// never addressed lane by lane (which put them on the stack, zeroed by rep stos, at every call).
template <class T, int W>
__attribute__((noinline)) void store_lanes(T* dst, const Vec<T, W>& y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = y[j];
}

// Block columns [n0, n0 + NV vectors) of C (kRows, .) = sum over k < K of A(r, k) * B(k, :),
// A(r, k) at a[r * a_row + k * a_k] (a row-major block or a transposed one), or, with Spread, in
// every lane of spread[k * kRows + r]; B's rows ldb apart; written (overwritten) into d.
// Rows [R0, R0 + RN) of the block only, where given (avx2: two halves of 4 rows, below).
template <class T, int W, int NV, bool Spread = false, int R0 = 0, int RN = kRows>
inline __attribute__((always_inline)) void block_product(int64_t K, const T* __restrict a, int64_t a_row,
                                                         int64_t a_k, const Vec<T, W>* __restrict spread,
                                                         const T* __restrict b, int64_t ldb, const Dest<T>& d,
                                                         int64_t n0) {
  using Unaligned = typename VecOf<T, W>::unaligned;
  constexpr int64_t n = kLane<T, W>;
  Vec<T, W> acc[RN][NV] = {};
  for (int64_t k = 0; k < K; ++k) {
    Vec<T, W> bk[NV];
    for (int v = 0; v < NV; ++v) bk[v] = *reinterpret_cast<const Unaligned*>(b + k * ldb + v * n);
    for (int r = 0; r < RN; ++r) {
      if constexpr (Spread) {  // generic (rows_product)
        for (int v = 0; v < NV; ++v) acc[r][v] += spread[k * kRows + R0 + r] * bk[v];
      } else {
        T x = a[(R0 + r) * a_row + k * a_k];
        for (int v = 0; v < NV; ++v) acc[r][v] += x * bk[v];
      }
    }
  }
  const Dest<T> at = d;  // in registers: the stores below may alias anything
#pragma GCC unroll 8
  for (int r = 0; r < RN; ++r) {  // unrolled: acc indexed by a variable would live on the stack
    if (R0 + r >= at.rows) break;
    T* row = at.c + (R0 + r) * at.ldc + n0;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      Vec<T, W> y = at.scale ? acc[r][v] * at.scale[R0 + r] : acc[r][v];
      if (at.into == Into::Add) y += *reinterpret_cast<const Unaligned*>(row + v * n);
      int64_t left = at.cols - n0 - v * n;
      if (left >= n) *reinterpret_cast<Unaligned*>(row + v * n) = y;
      else if (left > 0) store_lanes<T, W>(row + v * n, y, left);
    }
  }
}

// C (kRows, width) = A (kRows, K) B (K, width) into d, B's rows readable to a multiple of kLane: blocks two
// vectors wide (16 accumulators) where the level has 32 registers (avx512); at avx2 two vectors
// wide in halves of 4 rows (8 accumulators each), then one vector for what is left (8
// accumulators: 16 registers hold them, the B vector and the broadcast A).
// Returns the columns it computed (for the work count, attention_cpu_work_take).
// Generic (SSE2) has no broadcast from memory: each A value cost a load and a shuffle per column
// block, as many shuffles as multiplies. There A's block is spread once per product into
// `spread` (kRows * K vectors, 16-byte aligned, grown as needed), which every column block then
// multiplies by straight from memory.
template <class T, int W>
FG_CPU_KERNEL int64_t rows_product(int64_t K, const T* a, int64_t a_row, int64_t a_k, const T* b, int64_t ldb,
                                   int64_t width, const Dest<T>& d, std::vector<T>& spread_buf) {
  constexpr int64_t n = kLane<T, W>;
  int64_t c = 0;
  const Vec<T, W>* spread = nullptr;
  if constexpr (W == 16) {
    if (static_cast<int64_t>(spread_buf.size()) < (K * kRows + 1) * n) spread_buf.resize((K * kRows + 1) * n);
    auto* at = reinterpret_cast<Vec<T, W>*>((reinterpret_cast<uintptr_t>(spread_buf.data()) + W - 1) & ~uintptr_t(W - 1));
    for (int64_t k = 0; k < K; ++k)
      for (int r = 0; r < kRows; ++r) at[k * kRows + r] = Vec<T, W>{} + a[r * a_row + k * a_k];
    spread = at;
  }
  const int64_t end = std::min(width, d.cols);
  if constexpr (W == 64)
    for (; c + 2 * n <= width && c < d.cols; c += 2 * n)
      block_product<T, W, 2>(K, a, a_row, a_k, spread, b + c, ldb, d, c);
  // avx2: two vectors wide in two halves of 4 rows, 8 accumulators each, 6 loads per 8 multiply-adds
  // where one vector of 8 rows took 9 (the causal (16, 4, T, 32) forward+backward on one thread:
  // T = 512 74.7-76.3 -> 69.5 ms, T = 2048 71.5-74.6 -> 63.5 ms, 2026-12-07, a 2-core Xeon; three
  // vectors of 4 rows gained less)
  if constexpr (W == 32)
    for (; c + 2 * n <= width && c < d.cols; c += 2 * n) {
      block_product<T, W, 2, false, 0, kRows / 2>(K, a, a_row, a_k, spread, b + c, ldb, d, c);
      block_product<T, W, 2, false, kRows / 2, kRows / 2>(K, a, a_row, a_k, spread, b + c, ldb, d, c);
    }
  for (; c < end; c += n) {
    // A last block of at most a quarter or half a vector on vectors that narrow (16 bytes at
    // least): at avx512 a row of 20 keys took 32 columns, and the work of T = 20 was 2.4x T = 16's.
    if constexpr (W >= 64) {
      if (end - c <= n / 4) {
        block_product<T, W / 4, 1>(K, a, a_row, a_k, nullptr, b + c, ldb, d, c);
        return c + n / 4;
      }
    }
    if constexpr (W >= 32) {
      if (end - c <= n / 2) {
        block_product<T, W / 2, 1>(K, a, a_row, a_k, nullptr, b + c, ldb, d, c);
        return c + n / 2;
      }
    }
    block_product<T, W, 1, W == 16>(K, a, a_row, a_k, spread, b + c, ldb, d, c);
  }
  return c;
}

enum class Reduce : uint8_t { Max, Sum };

// kRows vectors' lanes reduced at once, out[r] the max or sum of v[r]'s lanes: a tree of folds,
// each halving every row's lanes and packing two vectors' rows into one (7 folds of 3 operations
// for 8 rows of 16 lanes, where one row at a time took 8 rows of a log2(lanes)-deep chain).
// Lane i of fold(a, b) over rows `w` lanes wide takes half i % (w / 2) of group i / (w / 2): a's
// groups first, then b's.
template <int n, int w>
constexpr int fold_lane(int i, bool upper) {
  int groups = n / w, g = i / (w / 2);
  return (g < groups ? 0 : n) + g % groups * w + (upper ? w / 2 : 0) + i % (w / 2);
}
template <Reduce op, class T, int W, int w, std::size_t... I>
inline __attribute__((always_inline)) void fold(const Vec<T, W>& a, const Vec<T, W>& b, Vec<T, W>& out,
                                                std::index_sequence<I...>) {
  constexpr int n = kLane<T, W>;
  Vec<T, W> lo = __builtin_shufflevector(a, b, fold_lane<n, w>(I, false)...);
  Vec<T, W> hi = __builtin_shufflevector(a, b, fold_lane<n, w>(I, true)...);
  if constexpr (op == Reduce::Max) out = hi > lo ? hi : lo;
  else out = lo + hi;
}
// `count` vectors, vector i holding rows [i kRows / count, (i + 1) kRows / count) in order, each
// row `w` lanes: pairs fold into one until a row is one lane (row r then lane r % n of vector
// r / n) or one vector is left, which folds with itself (its rows stay first, in order).
template <Reduce op, class T, int W, int w, int count>
inline __attribute__((always_inline)) void reduce_level(const Vec<T, W> (&v)[count], T (&out)[kRows]) {
  constexpr int n = kLane<T, W>;
  [[maybe_unused]] constexpr auto lanes = std::make_index_sequence<n>{};
  if constexpr (w == 1) {
    for (int r = 0; r < kRows; ++r) out[r] = v[r / n][r % n];
  } else if constexpr (count == 1) {
    Vec<T, W> next[1];
    fold<op, T, W, w>(v[0], v[0], next[0], lanes);
    reduce_level<op, T, W, w / 2, 1>(next, out);
  } else {
    Vec<T, W> next[count / 2];
    for (int i = 0; i < count / 2; ++i) fold<op, T, W, w>(v[2 * i], v[2 * i + 1], next[i], lanes);
    reduce_level<op, T, W, w / 2, count / 2>(next, out);
  }
}
template <Reduce op, class T, int W>
inline __attribute__((always_inline)) void reduce_rows(const Vec<T, W> (&v)[kRows], T (&out)[kRows]) {
  reduce_level<op, T, W, kLane<T, W>, kRows>(v, out);
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
FG_CPU_KERNEL void log_rows(const T (&x)[kRows], T (&out)[kRows]) {
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
template <class T, int W>
FG_CPU_KERNEL void copy_rows(const T* __restrict src, int64_t lds, T* __restrict dst, int64_t ldd, int64_t rows,
                             int64_t cols, const T* __restrict scale = nullptr) {
  using Unaligned = typename VecOf<T, W>::unaligned;
  for (int64_t r = 0; r < rows; ++r, src += lds, dst += ldd) {
    T f = scale ? scale[r] : T(1);
    int64_t c = 0;
    for (; c + kLane<T, W> <= cols; c += kLane<T, W>)
      *reinterpret_cast<Unaligned*>(dst + c) = *reinterpret_cast<const Unaligned*>(src + c) * f;
    for (; c < cols; ++c) dst[c] = src[c] * f;
  }
}
// One stage of a kLane x kLane transpose in registers: rows i and i + b (i without bit b) swap
// their off-diagonal b-lane blocks, which exchanges bit b of the row index with bit b of the lane.
template <class T, int W, int b, std::size_t... I>
inline __attribute__((always_inline)) void butterfly(Vec<T, W>* r, [[maybe_unused]] std::index_sequence<I...> lanes) {
  constexpr int n = kLane<T, W>;
  for (int i = 0; i < n; ++i) {
    if (i & b) continue;
    Vec<T, W> x = r[i], y = r[i + b];
    r[i] = __builtin_shufflevector(x, y, ((I & b) ? n + I - b : I)...);
    r[i + b] = __builtin_shufflevector(x, y, ((I & b) ? n + I : I + b)...);
  }
  if constexpr (2 * b < n) butterfly<T, W, 2 * b>(r, lanes);  // the next stage
}
// dst (cols, rows) = src (rows, cols) transposed, rows and cols multiples of kLane (padded
// buffers): kLane x kLane blocks through registers, log2(kLane) butterfly stages each.
template <class T, int W>
FG_CPU_KERNEL void transpose_padded(const T* __restrict src, int64_t lds, int64_t rows, int64_t cols, T* __restrict dst,
                                    int64_t ldd) {
  using Unaligned = typename VecOf<T, W>::unaligned;
  constexpr int n = kLane<T, W>;
  for (int64_t i0 = 0; i0 < rows; i0 += n)
    for (int64_t c0 = 0; c0 < cols; c0 += n) {
      Vec<T, W> r[n];
      for (int i = 0; i < n; ++i) r[i] = *reinterpret_cast<const Unaligned*>(src + (i0 + i) * lds + c0);
      butterfly<T, W, 1>(r, std::make_index_sequence<n>{});
      for (int i = 0; i < n; ++i) *reinterpret_cast<Unaligned*>(dst + (c0 + i) * ldd + i0) = r[i];
    }
}
}  // namespace
}  // namespace fg
