#include "kernels/linalg/packed_gemm.h"

#include <algorithm>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "kernels/common/vec.h"

namespace fg {
namespace {

// A panel is two vectors wide; a block of R rows takes R x 2 accumulators, which with the panel's
// two vectors and A's value fill the registers: 16 at generic and avx2 (R 6; generic's product
// takes one more, for the multiply before its add), 32 at avx512 (R 8). At generic R 6 ran the
// LSTM benchmark's forward 8-10% faster than R 4.
constexpr int kPanelVectors = 2;
template <int W>
constexpr int kBlockRows = W == 64 ? 8 : 6;
// The most bytes of packed panels a thread keeps between calls.
constexpr size_t kKeptBytes = size_t{2} << 20;
// Below this many multiply-adds a share of panels is not worth a thread.
constexpr int64_t kSerialWork = int64_t{1} << 18;

template <class T>
struct Product {
  const PackedB<T>& b;
  const T* a;  // (M, K), rows lda apart
  int64_t lda;
  // Generic's A: each value in every lane of a vector, (M, K) vectors. SSE2 has no broadcast from
  // memory, and a shuffle per value and panel took the ports the multiplies and adds need.
  const void* spread;
  const T* bias;  // (N) or null
  Store store;
  T* c;  // (M, N), rows ldc apart
  int64_t ldc;
};

// The columns of a partial last panel, value by value: out of line, so that the accumulators of
// the block are never addressed lane by lane (which would keep them on the stack).
template <class T>
__attribute__((noinline)) void store_columns(const T* tile, int64_t P, int rows, int64_t cols, const Product<T>& q,
                                             int64_t i0, int64_t j0) {
  for (int r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      T& out = q.c[(i0 + r) * q.ldc + j0 + j];
      const T v = tile[r * P + j] + (q.bias ? q.bias[j0 + j] : T(0));
      out = q.store == Store::Accumulate ? out + v : v;
    }
}

// Rows [i0, i0 + R) of C at panel p's columns: R x 2 accumulators over every k.
template <class T, int W, int R>
FG_CPU_KERNEL void block(const Product<T>& q, int64_t i0, int64_t p) {
  using U = typename VecOf<T, W>::unaligned;
  constexpr int64_t L = kLane<T, W>, P = kPanelVectors * L;
  const int64_t K = q.b.K;
  const T* __restrict panel = q.b.panels + p * K * P;
  const T* __restrict a = q.a + i0 * q.lda;
  const Vec<T, W>* __restrict spread = nullptr;
  if constexpr (W == 16) spread = static_cast<const Vec<T, W>*>(q.spread) + i0 * K;
  Vec<T, W> acc[R][kPanelVectors];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec<T, W>{};
  for (int64_t k = 0; k < K; ++k) {
    const Vec<T, W> b0 = *reinterpret_cast<const U*>(panel + k * P);
    const Vec<T, W> b1 = *reinterpret_cast<const U*>(panel + k * P + L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (W == 16) {
        const Vec<T, W> x = spread[r * K + k];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      } else {
        const T x = a[r * q.lda + k];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      }
    }
  }
  const int64_t j0 = p * P;
  if (q.b.N - j0 >= P) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < kPanelVectors; ++v) {
        U* out = reinterpret_cast<U*>(q.c + (i0 + r) * q.ldc + j0 + v * L);
        Vec<T, W> y = acc[r][v];
        if (q.bias) y += *reinterpret_cast<const U*>(q.bias + j0 + v * L);
        if (q.store == Store::Accumulate) y += *out;
        *out = y;
      }
    return;
  }
  alignas(64) T tile[R * P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < kPanelVectors; ++v) *reinterpret_cast<U*>(tile + r * P + v * L) = acc[r][v];
  store_columns(tile, P, R, q.b.N - j0, q, i0, j0);
}

// A block of fewer rows than R at panel p: a block of exactly that many rows.
template <class T, int W, int R = 1>
FG_CPU_KERNEL void last_rows(const Product<T>& q, int64_t i0, int64_t rows, int64_t p) {
  if constexpr (R < kBlockRows<W>) {
    if (rows == R) return block<T, W, R>(q, i0, p);
    return last_rows<T, W, R + 1>(q, i0, rows, p);
  }
}

// Panels [p0, p1) of C, every row: a panel stays in cache while the blocks of rows pass. The rows
// are cut into blocks of near-equal size (32 rows at avx2: 5 or 6 each), since a block of one
// or two rows has too few accumulators to hide the multiply-add latency.
template <class T, int W>
FG_CPU_KERNEL void panels(const Product<T>& q, int64_t M, int64_t p0, int64_t p1) {
  constexpr int R = kBlockRows<W>;
  const int64_t blocks = (M + R - 1) / R;
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t n = 0; n < blocks; ++n) {
      const int64_t i0 = M * n / blocks, rows = M * (n + 1) / blocks - i0;
      if (rows == R) block<T, W, R>(q, i0, p);
      else last_rows<T, W>(q, i0, rows, p);
    }
}

}  // namespace

template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb) {
  PackedB<T> b;
  b.K = K, b.N = N, b.vector_bytes = isa_vector_bytes();
  const int64_t P = b.width = kPanelVectors * b.vector_bytes / static_cast<int64_t>(sizeof(T));
  thread_local std::vector<T> kept;
  const size_t size = static_cast<size_t>((N + P - 1) / P * P * K);
  std::vector<T>& buffer = size * sizeof(T) <= kKeptBytes ? kept : b.own;
  buffer.assign(size, T(0));
  b.panels = buffer.data();
  for (int64_t j = 0; j < N; ++j) {  // column j: panel j / P, lane j % P of each of its K rows
    T* to = buffer.data() + j / P * K * P + j % P;
    if (trans_b)
      for (int64_t k = 0; k < K; ++k) to[k * P] = B[j * ldb + k];
    else
      for (int64_t k = 0; k < K; ++k) to[k * P] = B[k * ldb + j];
  }
  return b;
}

template <class T>
void packed_gemm(const PackedB<T>& b, int64_t M, const T* A, int64_t lda, const T* bias, Store store, T* C,
                 int64_t ldc) {
  if (M == 0 || b.N == 0) return;
  thread_local std::vector<T> kept;
  std::vector<T> own;
  std::vector<T>& spread = static_cast<size_t>(M * b.K) * 16 <= kKeptBytes ? kept : own;
  if (b.vector_bytes == 16) {
    const int64_t L = 16 / static_cast<int64_t>(sizeof(T));
    spread.resize(static_cast<size_t>(M * b.K * L));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < b.K; ++k) std::fill_n(spread.data() + (i * b.K + k) * L, L, A[i * lda + k]);
  }
  const Product<T> q{b, A, lda, spread.data(), bias, store, C, ldc};
  const int64_t count = (b.N + b.width - 1) / b.width, per_panel = std::max<int64_t>(1, M * b.K * b.width);
  parallel_for(count, std::max<int64_t>(1, kSerialWork / per_panel), [&](int64_t p0, int64_t p1) {
    switch (b.vector_bytes) {
      case 64: FG_AT_WIDTH(64, (panels<T, 64>(q, M, p0, p1))); return;
      case 32: FG_AT_WIDTH(32, (panels<T, 32>(q, M, p0, p1))); return;
      default: FG_AT_WIDTH(16, (panels<T, 16>(q, M, p0, p1)));
    }
  });
}

template struct PackedB<float>;
template struct PackedB<double>;
template PackedB<float> pack_b<float>(bool, int64_t, int64_t, const float*, int64_t);
template PackedB<double> pack_b<double>(bool, int64_t, int64_t, const double*, int64_t);
template void packed_gemm<float>(const PackedB<float>&, int64_t, const float*, int64_t, const float*, Store, float*,
                                 int64_t);
template void packed_gemm<double>(const PackedB<double>&, int64_t, const double*, int64_t, const double*, Store,
                                  double*, int64_t);

}  // namespace fg
