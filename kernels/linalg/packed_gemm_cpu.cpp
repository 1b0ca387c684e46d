#include "kernels/linalg/packed_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/vec.h"

namespace fg {
namespace {

// A panel is two vectors wide; a block of R rows takes R x 2 accumulators, which with the panel's
// two vectors and A's value fill the registers: 16 at generic and avx2 (R 6; generic's product
// takes one more, for the multiply before its add), 27 of 32 at avx512 (R 12). At generic R 6 ran
// the LSTM benchmark's forward 8-10% faster than R 4. The k loop is unrolled 4 times: with the
// panels on 64-byte boundaries that took a (32, 256) x (256, 1024) float32 product from 143 to
// 160-166 GFLOP/s at avx512 (R 8; R 12 another 2-4%) and from 92 to 100 at avx2 on a Xeon whose
// FMA peak is 210 and 105 (2026-12-07).
constexpr int kPanelVectors = 2;
template <int W>
constexpr int kBlockRows = W == 64 ? 12 : 6;
constexpr uintptr_t kAlign = 64;
// The most bytes of packed panels a thread keeps between calls.
constexpr size_t kKeptBytes = size_t{2} << 20;

template <class T>
struct Product {
  const PackedB<T>& b;
  const RowsA<T>& a;
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
  const int64_t K = q.b.K, lda = q.a.lda;
  const T* __restrict panel = q.b.panels + p * K * P;
  const T* __restrict a = q.a.a + i0 * lda;
  const Vec<T, W>* __restrict spread = nullptr;
  if constexpr (W == 16) spread = static_cast<const Vec<T, W>*>(q.a.spread) + i0 * K;
  Vec<T, W> acc[R][kPanelVectors];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec<T, W>{};
#pragma GCC unroll 4
  for (int64_t k = 0; k < K; ++k) {
    const Vec<T, W> b0 = *reinterpret_cast<const U*>(panel + k * P);
    const Vec<T, W> b1 = *reinterpret_cast<const U*>(panel + k * P + L);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if constexpr (W == 16) {
        const Vec<T, W> x = spread[r * K + k];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      } else {
        const T x = a[r * lda + k];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      }
    }
  }
  const int64_t gp = q.b.group_panels(), u = p % gp, cols = std::min(P, q.b.group_columns() - u * P);
  const int64_t j0 = p / gp * q.b.group_columns() + u * P;
  if (cols == P) {
#pragma GCC unroll 16
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
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < kPanelVectors; ++v) *reinterpret_cast<U*>(tile + r * P + v * L) = acc[r][v];
  store_columns(tile, P, R, cols, q, i0, j0);
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
FG_CPU_KERNEL void panels(const Product<T>& q, int64_t p0, int64_t p1) {
  constexpr int R = kBlockRows<W>;
  const int64_t M = q.a.M;
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
int64_t panel_width() {
  return kPanelVectors * isa_vector_bytes() / static_cast<int64_t>(sizeof(T));
}

template <class T>
int64_t packed_size(int64_t K, int64_t N, int64_t groups) {
  const int64_t P = panel_width<T>();
  return groups * ((N / groups + P - 1) / P) * K * P + static_cast<int64_t>(kAlign / sizeof(T));
}

template <class T>
PackedB<T> packed_layout(int64_t K, int64_t N, int64_t groups, T* into) {
  PackedB<T> b;
  b.K = K, b.N = N, b.groups = groups, b.vector_bytes = isa_vector_bytes();
  b.width = panel_width<T>();
  const size_t size = static_cast<size_t>(packed_size<T>(K, N, groups));
  if (!into) {
    thread_local std::vector<T> kept;
    std::vector<T>& buffer = size * sizeof(T) <= kKeptBytes ? kept : b.own;
    buffer.resize(size);
    into = buffer.data();
  }
  // panels from a 64-byte boundary: no load splits a line
  b.panels = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(into) + kAlign - 1) & ~(kAlign - 1));
  return b;
}

namespace {

// `count` rows of n values (ld apart) into consecutive panels P wide (panel_stride apart), each
// panel's rows P apart, the last panel's missing columns zero: P a constant, so that each copy is
// a few vector moves, not a call.
template <int P, class T>
void rows_into_panels(const T* src, int64_t count, int64_t ld, int64_t n, int64_t panel_stride, T* dst) {
  int64_t j = 0;
  for (; j + P <= n; j += P, dst += panel_stride)
    for (int64_t r = 0; r < count; ++r) std::memcpy(dst + r * P, src + r * ld + j, P * sizeof(T));
  if (j == n) return;
  for (int64_t r = 0; r < count; ++r) {
    std::memcpy(dst + r * P, src + r * ld + j, (n - j) * sizeof(T));
    std::fill(dst + r * P + (n - j), dst + (r + 1) * P, T(0));
  }
}

}  // namespace

template <class T>
void pack_rows(const PackedB<T>& b, int64_t k0, int64_t count, const T* rows, int64_t ld) {
  const int64_t gp = b.group_panels(), stride = b.K * b.width, n = b.group_columns();
  for (int64_t g = 0; g < b.groups; ++g) {
    const T* src = rows + g * n;
    T* dst = b.panels + g * gp * stride + k0 * b.width;
    switch (b.width) {
      case 4: rows_into_panels<4>(src, count, ld, n, stride, dst); break;
      case 8: rows_into_panels<8>(src, count, ld, n, stride, dst); break;
      case 16: rows_into_panels<16>(src, count, ld, n, stride, dst); break;
      default: rows_into_panels<32>(src, count, ld, n, stride, dst);
    }
  }
}

template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb, int64_t groups, T* into) {
  PackedB<T> b = packed_layout<T>(K, N, groups, into);
  if (!trans_b) {  // a row's columns are contiguous
    pack_rows(b, 0, K, B, ldb);
    return b;
  }
  // Stored (N, K): panel by panel, the panel's P rows of B read side by side, each in order.
  const int64_t P = b.width, gp = b.group_panels();
  for (int64_t p = 0; p < groups * gp; ++p) {
    const int64_t u = p % gp, cols = std::min(P, b.group_columns() - u * P);
    const int64_t j0 = p / gp * b.group_columns() + u * P;
    T* to = b.panels + p * K * P;
    for (int64_t k = 0; k < K; ++k, to += P) {
      for (int64_t j = 0; j < cols; ++j) to[j] = B[(j0 + j) * ldb + k];
      std::fill(to + cols, to + P, T(0));
    }
  }
  return b;
}

template <class T>
RowsA<T> prepare_a(const PackedB<T>& b, int64_t M, const T* A, int64_t lda) {
  RowsA<T> r;
  r.a = A, r.M = M, r.lda = lda;
  if (b.vector_bytes != 16) return r;
  const int64_t L = 16 / static_cast<int64_t>(sizeof(T));
  thread_local std::vector<T> kept;
  std::vector<T>& spread = static_cast<size_t>(M * b.K) * 16 <= kKeptBytes ? kept : r.own;
  spread.resize(static_cast<size_t>(M * b.K * L));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < b.K; ++k) std::fill_n(spread.data() + (i * b.K + k) * L, L, A[i * lda + k]);
  r.spread = spread.data();
  return r;
}

template <class T>
void packed_gemm(const PackedB<T>& b, const RowsA<T>& a, const T* bias, Store store, T* C, int64_t ldc, int64_t p0,
                 int64_t p1) {
  if (a.M == 0 || p0 >= p1) return;
  const Product<T> q{b, a, bias, store, C, ldc};
  switch (b.vector_bytes) {
    case 64: FG_AT_WIDTH(64, (panels<T, 64>(q, p0, p1))); return;
    case 32: FG_AT_WIDTH(32, (panels<T, 32>(q, p0, p1))); return;
    default: FG_AT_WIDTH(16, (panels<T, 16>(q, p0, p1)));
  }
}

template struct PackedB<float>;
template struct PackedB<double>;
template PackedB<float> pack_b<float>(bool, int64_t, int64_t, const float*, int64_t, int64_t, float*);
template PackedB<double> pack_b<double>(bool, int64_t, int64_t, const double*, int64_t, int64_t, double*);
template int64_t panel_width<float>();
template int64_t panel_width<double>();
template int64_t packed_size<float>(int64_t, int64_t, int64_t);
template int64_t packed_size<double>(int64_t, int64_t, int64_t);
template PackedB<float> packed_layout<float>(int64_t, int64_t, int64_t, float*);
template PackedB<double> packed_layout<double>(int64_t, int64_t, int64_t, double*);
template void pack_rows<float>(const PackedB<float>&, int64_t, int64_t, const float*, int64_t);
template void pack_rows<double>(const PackedB<double>&, int64_t, int64_t, const double*, int64_t);
template RowsA<float> prepare_a<float>(const PackedB<float>&, int64_t, const float*, int64_t);
template RowsA<double> prepare_a<double>(const PackedB<double>&, int64_t, const double*, int64_t);
template void packed_gemm<float>(const PackedB<float>&, const RowsA<float>&, const float*, Store, float*, int64_t,
                                 int64_t, int64_t);
template void packed_gemm<double>(const PackedB<double>&, const RowsA<double>&, const double*, Store, double*,
                                  int64_t, int64_t, int64_t);

}  // namespace fg
