#include "kernels/linalg/gemv.h"

#include <algorithm>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/vec.h"

namespace fg {
namespace {

// Below this many multiply-adds one thread multiplies (waking the pool costs more).
constexpr int64_t kSerialWork = int64_t{1} << 18;
// Column bands of the threads start on multiples of this (whole vectors at every level).
constexpr int64_t kBandAlign = 16;

template <class T>
struct Gemv {
  int64_t M, N, K;
  const T* a;            // A (M, K): A(i, k) at a[i * a_row + k * a_k]
  int64_t a_row, a_k;
  const T* b;            // dot form: W (N, K) rows ldb apart; row form: B (K, N) rows ldb apart
  int64_t ldb;
  T beta;
  T* c;                  // C (M, N), rows ldc apart
  int64_t ldc;
  const T* bias;         // (N) or null
  int64_t ahead = 0;     // prefetch the rows of W (B) being read this many values ahead (0: none)
};

// A thread's share of W larger than its core's cache streams from L3 or memory, where prefetching
// each row it reads this far ahead (once per cache line) keeps more of them in flight. Measured on
// the 2-core Xeon (2026-12-07), one thread, d = 4096 with W cold (12 matrices in turn, 768 MB):
// x W^T at generic 4.9-5.2 -> 4.3-4.6 ms (13 -> 15 GB/s; PyTorch's MKL about 16), x W (row-major W)
// 5.1-5.3 -> 4.5-4.65 ms, avx2 and avx512 unchanged (4.1-4.4); W in L3: 2.4-2.6 -> 2.3-2.4 ms at
// every level. Within L2 it only costs (generic d = 512, prefetching: 14 -> 17 us), so it is off
// there.
constexpr int64_t kAheadBytes = 1024;

// ---- dot form, C = A W^T: R rows of A against V rows of W at a time, R V accumulators of L lanes
// of K each (unrolled: an accumulator indexed by a variable lives on the stack), then their lanes.
template <class T, int W, int R, int V>
FG_CPU_KERNEL void dot_block(const Gemv<T>& p, int64_t j) {
  using U = typename VecOf<T, W>::unaligned;
  constexpr int64_t L = kLane<T, W>;
  Vec<T, W> acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = Vec<T, W>{};
  const T* w = p.b + j * p.ldb;
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    Vec<T, W> wv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) wv[v] = *reinterpret_cast<const U*>(w + v * p.ldb + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec<T, W> av = *reinterpret_cast<const U*>(p.a + r * p.a_row + k);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] += av * wv[v];
    }
  };
  constexpr int64_t Line = std::max<int64_t>(L, 64 / sizeof(T));  // a cache line's values, whole vectors
  int64_t k = 0;
  for (; k + Line <= p.K; k += Line) {
    if (p.ahead)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) __builtin_prefetch(w + v * p.ldb + k + p.ahead);
#pragma GCC unroll 4
    for (int64_t e = 0; e < Line; e += L) step(k + e);
  }
  for (; k + L <= p.K; k += L) step(k);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      T sum = lane_sum<T, W>(acc[r][v]);
      for (int64_t t = k; t < p.K; ++t) sum += p.a[r * p.a_row + t] * w[v * p.ldb + t];
      T& out = p.c[r * p.ldc + j + v];
      out = (p.beta != T(0) ? p.beta * out + sum : sum) + (p.bias ? p.bias[j + v] : T(0));
    }
}
template <class T, int W, int R>
FG_CPU_KERNEL void dot_columns(const Gemv<T>& p, int64_t j0, int64_t j1) {
  // 8 accumulators: with the V rows of W and A's vector they fit 16 registers (generic, avx2).
  constexpr int V = R <= 2 ? 4 : R <= 4 ? 2 : 1;
  int64_t j = j0;
  for (; j + V <= j1; j += V) dot_block<T, W, R, V>(p, j);
  for (; j < j1; ++j) dot_block<T, W, R, 1>(p, j);
}

// ---- row form, C += A B with B row-major: C's row segment is loaded, takes the products of KB
// rows of B (each streamed along N, contiguous), and is stored again; L columns at a time, the
// last columns one by one. C holds beta C + bias before the first rows. Eight rows of B a pass
// rather than four halve C's loads and stores: x W at d = 256-700 (W in L2), one thread, a C++ loop
// on the 2-core Xeon (2026-12-07): generic 5.5 -> 4.6 us (256), 20.0 -> 17.0 (512), 68-82 -> 61-62
// (700); avx2 and avx512 11-15% faster at 256-512; d = 1024 unchanged; 2-8 rows mostly faster.
template <class T, int W, int R, int KB>
FG_CPU_KERNEL void row_block(const Gemv<T>& p, int64_t k, int64_t j0, int64_t j1) {
  using U = typename VecOf<T, W>::unaligned;
  constexpr int64_t L = kLane<T, W>;
  T s[R][KB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < KB; ++q) s[r][q] = p.a[r * p.a_row + (k + q) * p.a_k];
  const T* b = p.b + k * p.ldb;
  auto step = [&](int64_t j) __attribute__((always_inline)) {
    Vec<T, W> bv[KB];
#pragma GCC unroll 8
    for (int q = 0; q < KB; ++q) bv[q] = *reinterpret_cast<const U*>(b + q * p.ldb + j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      U* out = reinterpret_cast<U*>(p.c + r * p.ldc + j);
      Vec<T, W> y = *out;
#pragma GCC unroll 8
      for (int q = 0; q < KB; ++q) y += s[r][q] * bv[q];
      *out = y;
    }
  };
  constexpr int64_t Line = std::max<int64_t>(L, 64 / sizeof(T));  // a cache line's values, whole vectors
  int64_t j = j0;
  for (; j + Line <= j1; j += Line) {
    if (p.ahead)
#pragma GCC unroll 8
      for (int q = 0; q < KB; ++q) __builtin_prefetch(b + q * p.ldb + j + p.ahead);
#pragma GCC unroll 8
    for (int64_t e = 0; e < Line; e += L) step(j + e);
  }
  for (; j + L <= j1; j += L) step(j);
  for (; j < j1; ++j)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      T y = p.c[r * p.ldc + j];
#pragma GCC unroll 8
      for (int q = 0; q < KB; ++q) y += s[r][q] * b[q * p.ldb + j];
      p.c[r * p.ldc + j] = y;
    }
}
template <class T, int W, int R>
FG_CPU_KERNEL void row_columns(const Gemv<T>& p, int64_t j0, int64_t j1) {
  int64_t k = 0;
  for (; k + 8 <= p.K; k += 8) row_block<T, W, R, 8>(p, k, j0, j1);
  if (k + 4 <= p.K) row_block<T, W, R, 4>(p, k, j0, j1), k += 4;
  for (; k < p.K; ++k)  // the last rows of B, one at a time
    for (int r = 0; r < R; ++r) {
      const T s = p.a[r * p.a_row + k * p.a_k];
      const T* b = p.b + k * p.ldb;
      T* c = p.c + r * p.ldc;
      for (int64_t j = j0; j < j1; ++j) c[j] += s * b[j];
    }
}

// Columns [j0, j1) of C at width W, M rows a template argument.
template <class T, int W, bool Dot, int R = 1>
FG_CPU_KERNEL void columns(const Gemv<T>& p, int64_t j0, int64_t j1) {
  if constexpr (R < kGemvRows) {
    if (p.M > R) return columns<T, W, Dot, R + 1>(p, j0, j1);
  }
  if constexpr (Dot) dot_columns<T, W, R>(p, j0, j1);
  else row_columns<T, W, R>(p, j0, j1);
}

template <class T, bool Dot>
void run_columns(const Gemv<T>& p, int64_t j0, int64_t j1) {
  switch (isa_vector_bytes()) {
    case 64: FG_AT_WIDTH(64, (columns<T, 64, Dot>(p, j0, j1))); return;
    case 32: FG_AT_WIDTH(32, (columns<T, 32, Dot>(p, j0, j1))); return;
    default: FG_AT_WIDTH(16, (columns<T, 16, Dot>(p, j0, j1)));
  }
}

}  // namespace

bool gemv_cpu_applies(bool, bool, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= kGemvRows && N >= 1 && K >= 1;
}

template <class T>
void gemv_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
              int64_t ldb, T beta, T* C, int64_t ldc, const T* bias) {
  Gemv<T> p{M, N, K, A, trans_a ? 1 : lda, trans_a ? lda : 1, B, ldb, beta, C, ldc, bias};
  std::vector<T> rows;
  if (trans_b && trans_a) {  // the dot form reads A's rows contiguous: a copy of A (M K values)
    rows.resize(static_cast<size_t>(M * K));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) rows[i * K + k] = A[k * lda + i];
    p.a = rows.data(), p.a_row = K, p.a_k = 1;
  }
  const int64_t units = (N + kBandAlign - 1) / kBandAlign;
  const int64_t parts = in_parallel_region() || M * N * K < kSerialWork ? 1 : std::min<int64_t>(pool_threads(), units);
  parallel_for(parts, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t j0 = std::min(N, units * q / parts * kBandAlign);
      const int64_t j1 = std::min(N, units * (q + 1) / parts * kBandAlign);
      Gemv<T> band = p;
      const bool streams = (j1 - j0) * K * static_cast<int64_t>(sizeof(T)) > core_cache_bytes();
      band.ahead = streams ? kAheadBytes / static_cast<int64_t>(sizeof(T)) : 0;
      if (trans_b) {
        run_columns<T, true>(band, j0, j1);
        continue;
      }
      for (int64_t i = 0; i < M; ++i)  // the row form adds onto beta C + bias
        for (int64_t j = j0; j < j1; ++j) {
          T& c = C[i * ldc + j];
          c = (beta != T(0) ? beta * c : T(0)) + (bias ? bias[j] : T(0));
        }
      run_columns<T, false>(band, j0, j1);
    }
  });
}

template void gemv_cpu<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                              float, float*, int64_t, const float*);
template void gemv_cpu<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                               double, double*, int64_t, const double*);

}  // namespace fg
