#include "kernels/linalg/packed_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/vec.h"
#if FG_CPU_LEVELS
#include <immintrin.h>
#endif

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
  Columns columns;
};

// Where a block's operands are read: B's panels and A's rows lda apart, B's rows in place (at
// b.offsets), or A's rows in place (at a.offsets; at generic they are already spread).
enum class Source { Packed, InPlaceB, InPlaceA };

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

// A run of a vector's lanes [lo, hi) whose columns are kept (Columns), lane 0 at C + at.
struct Run {
  int lo, hi;
  int64_t at;
};

// The kept runs of the L lanes from wide column j (n of them inside C): at most L + 1.
int kept_runs(const Columns& w, int64_t j, int n, Run* runs) {
  int count = 0;
  for (int l = 0; l < n;) {
    const int64_t x = (j + l) % w.stride, line = std::min<int64_t>(n - l, w.stride - x);
    const int64_t kept = std::max<int64_t>(0, std::min(line, w.keep - x));
    if (kept) runs[count++] = {l, l + static_cast<int>(kept), (j + l) / w.stride * w.keep + x - l};
    l += static_cast<int>(line);
  }
  return count;
}

// A block's rows (in `tile`, P = 2 vectors apart) into C run by run (runs[v * (L + 1) ..], count[v]
// of them for vector v), written over C or added to it: with masked loads and stores at avx2 and
// avx512, out of line (so that the level's instructions need not be inlined into a kernel compiled
// for every level), lane by lane elsewhere.
template <class T, int L>
void store_runs_lanes(const T* tile, int rows, const Run* runs, const int* count, T* c, int64_t ldc, bool add) {
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < 2; ++v)
      for (int n = 0; n < count[v]; ++n) {
        const Run& run = runs[v * (L + 1) + n];
        T* out = c + r * ldc + run.at;
        for (int l = run.lo; l < run.hi; ++l) out[l] = (add ? out[l] : T(0)) + tile[r * 2 * L + v * L + l];
      }
}
#if FG_CPU_LEVELS
template <class T>
FG_TARGET_AVX512 __attribute__((noinline)) void store_runs_avx512(const T* tile, int rows, const Run* runs,
                                                                   const int* count, T* c, int64_t ldc, bool add) {
  constexpr int L = 64 / sizeof(T);
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < 2; ++v)
      for (int n = 0; n < count[v]; ++n) {
        const Run& run = runs[v * (L + 1) + n];
        const unsigned mask = ((1u << run.hi) - 1) & ~((1u << run.lo) - 1);
        T* out = c + r * ldc + run.at;
        const T* in = tile + r * 2 * L + v * L;
        if constexpr (sizeof(T) == 4) {
          __m512 y = _mm512_load_ps(in);
          if (add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), out));
          _mm512_mask_storeu_ps(out, static_cast<__mmask16>(mask), y);
        } else {
          __m512d y = _mm512_load_pd(in);
          if (add) y = _mm512_add_pd(y, _mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), out));
          _mm512_mask_storeu_pd(out, static_cast<__mmask8>(mask), y);
        }
      }
}
template <class T>
FG_TARGET_AVX2 __attribute__((noinline)) void store_runs_avx2(const T* tile, int rows, const Run* runs,
                                                               const int* count, T* c, int64_t ldc, bool add) {
  constexpr int L = 32 / sizeof(T);
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < 2; ++v)
      for (int n = 0; n < count[v]; ++n) {
        const Run& run = runs[v * (L + 1) + n];
        T* out = c + r * ldc + run.at;
        const T* in = tile + r * 2 * L + v * L;
        if constexpr (sizeof(T) == 4) {
          const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
          const __m256i mask = _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(run.lo - 1)),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32(run.hi), lane));
          __m256 y = _mm256_load_ps(in);
          if (add) y = _mm256_add_ps(y, _mm256_maskload_ps(out, mask));
          _mm256_maskstore_ps(out, mask, y);
        } else {
          const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
          const __m256i mask = _mm256_and_si256(_mm256_cmpgt_epi64(lane, _mm256_set1_epi64x(run.lo - 1)),
                                                _mm256_cmpgt_epi64(_mm256_set1_epi64x(run.hi), lane));
          __m256d y = _mm256_load_pd(in);
          if (add) y = _mm256_add_pd(y, _mm256_maskload_pd(out, mask));
          _mm256_maskstore_pd(out, mask, y);
        }
      }
}
#endif
template <class T, int W>
void store_runs(const T* tile, int rows, const Run* runs, const int* count, T* c, int64_t ldc, bool add) {
#if FG_CPU_LEVELS
  if constexpr (W == 64) return store_runs_avx512(tile, rows, runs, count, c, ldc, add);
  if constexpr (W == 32) return store_runs_avx2(tile, rows, runs, count, c, ldc, add);
#endif
  store_runs_lanes<T, kLane<T, W>>(tile, rows, runs, count, c, ldc, add);
}

// Rows [i0, i0 + R) of C at panel p's columns: R x 2 accumulators over every k.
template <class T, int W, int R, Source S>
FG_CPU_KERNEL void block(const Product<T>& q, int64_t i0, int64_t p) {
  using U = typename VecOf<T, W>::unaligned;
  constexpr int64_t L = kLane<T, W>, P = kPanelVectors * L;
  const int64_t K = q.b.K, lda = q.a.lda;
  const int64_t gp = q.b.group_panels(), u = p % gp, cols = std::min(P, q.b.group_columns() - u * P);
  const int64_t j0 = p / gp * q.b.group_columns() + u * P;
  const T* __restrict panel = S == Source::InPlaceB ? q.b.rows + j0 : q.b.panels + p * K * P;
  const T* __restrict a = q.a.a + (S == Source::InPlaceA ? 0 : i0 * lda);
  const Vec<T, W>* __restrict spread = nullptr;
  if constexpr (W == 16) spread = static_cast<const Vec<T, W>*>(q.a.spread) + i0 * K;
  const int64_t* a_at = S == Source::InPlaceA ? q.a.offsets + i0 : nullptr;
  Vec<T, W> acc[R][kPanelVectors];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec<T, W>{};
#pragma GCC unroll 4
  for (int64_t k = 0; k < K; ++k) {
    const T* row = S == Source::InPlaceB ? panel + q.b.offsets[k] : panel + k * P;
    const Vec<T, W> b0 = *reinterpret_cast<const U*>(row);
    const Vec<T, W> b1 = *reinterpret_cast<const U*>(row + L);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if constexpr (W == 16) {
        const Vec<T, W> x = spread[r * K + k];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      } else {
        const T x = S == Source::InPlaceA ? a[a_at[r] + k] : a[r * lda + k];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      }
    }
  }
  if (cols == P && !q.columns.stride) {
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
  if (!q.columns.stride) return store_columns(tile, P, R, cols, q, i0, j0);
  Run runs[kPanelVectors * (L + 1)];  // wide columns (no bias): run by run
  int count[kPanelVectors];
  for (int v = 0; v < kPanelVectors; ++v)
    count[v] = kept_runs(q.columns, j0 + v * L, static_cast<int>(std::clamp<int64_t>(cols - v * L, 0, L)),
                         runs + v * (L + 1));
  store_runs<T, W>(tile, R, runs, count, q.c + i0 * q.ldc, q.ldc, q.store == Store::Accumulate);
}

// A block of fewer rows than R at panel p: a block of exactly that many rows.
template <class T, int W, Source S, int R = 1>
FG_CPU_KERNEL void last_rows(const Product<T>& q, int64_t i0, int64_t rows, int64_t p) {
  if constexpr (R < kBlockRows<W>) {
    if (rows == R) return block<T, W, R, S>(q, i0, p);
    return last_rows<T, W, S, R + 1>(q, i0, rows, p);
  }
}

// Panels [p0, p1) of C, every row: a panel stays in cache while the blocks of rows pass. The rows
// are cut into blocks of near-equal size (32 rows at avx2: 5 or 6 each), since a block of one
// or two rows has too few accumulators to hide the multiply-add latency.
template <class T, int W, Source S>
FG_CPU_KERNEL void panels(const Product<T>& q, int64_t p0, int64_t p1) {
  constexpr int R = kBlockRows<W>;
  const int64_t M = q.a.M;
  const int64_t blocks = (M + R - 1) / R;
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t n = 0; n < blocks; ++n) {
      const int64_t i0 = M * n / blocks, rows = M * (n + 1) / blocks - i0;
      if (rows == R) block<T, W, R, S>(q, i0, p);
      else last_rows<T, W, S>(q, i0, rows, p);
    }
}

template <class T, int W>
FG_CPU_KERNEL void panels(const Product<T>& q, int64_t p0, int64_t p1) {
  if (q.b.offsets) return panels<T, W, Source::InPlaceB>(q, p0, p1);
  if (q.a.offsets && W != 16) return panels<T, W, Source::InPlaceA>(q, p0, p1);
  panels<T, W, Source::Packed>(q, p0, p1);
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
PackedB<T> in_place_b(int64_t K, int64_t N, const T* rows, const int64_t* offsets) {
  PackedB<T> b;
  b.K = K, b.N = N, b.vector_bytes = isa_vector_bytes(), b.width = panel_width<T>();
  b.rows = rows, b.offsets = offsets;
  return b;
}

namespace {

template <class T>
RowsA<T> rows_a(const PackedB<T>& b, int64_t M, const T* A, int64_t lda, const int64_t* offsets) {
  RowsA<T> r;
  r.a = A, r.M = M, r.lda = lda, r.offsets = offsets;
  if (b.vector_bytes != 16) return r;
  const int64_t L = 16 / static_cast<int64_t>(sizeof(T));
  thread_local std::vector<T> kept;
  std::vector<T>& spread = static_cast<size_t>(M * b.K) * 16 <= kKeptBytes ? kept : r.own;
  spread.resize(static_cast<size_t>(M * b.K * L));
  for (int64_t i = 0; i < M; ++i) {
    const T* row = A + (offsets ? offsets[i] : i * lda);
    for (int64_t k = 0; k < b.K; ++k) std::fill_n(spread.data() + (i * b.K + k) * L, L, row[k]);
  }
  r.spread = spread.data();
  return r;
}

}  // namespace

template <class T>
RowsA<T> prepare_a(const PackedB<T>& b, int64_t M, const T* A, int64_t lda) {
  return rows_a(b, M, A, lda, nullptr);
}

template <class T>
RowsA<T> prepare_a(const PackedB<T>& b, int64_t M, const T* A, const int64_t* offsets) {
  return rows_a(b, M, A, 0, offsets);
}

template <class T>
void packed_gemm(const PackedB<T>& b, const RowsA<T>& a, const T* bias, Store store, T* C, int64_t ldc, int64_t p0,
                 int64_t p1, Columns columns) {
  if (a.M == 0 || p0 >= p1) return;
  const Product<T> q{b, a, bias, store, C, ldc, columns};
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
template PackedB<float> in_place_b<float>(int64_t, int64_t, const float*, const int64_t*);
template PackedB<double> in_place_b<double>(int64_t, int64_t, const double*, const int64_t*);
template RowsA<float> prepare_a<float>(const PackedB<float>&, int64_t, const float*, int64_t);
template RowsA<double> prepare_a<double>(const PackedB<double>&, int64_t, const double*, int64_t);
template RowsA<float> prepare_a<float>(const PackedB<float>&, int64_t, const float*, const int64_t*);
template RowsA<double> prepare_a<double>(const PackedB<double>&, int64_t, const double*, const int64_t*);
template void packed_gemm<float>(const PackedB<float>&, const RowsA<float>&, const float*, Store, float*, int64_t,
                                 int64_t, int64_t, Columns);
template void packed_gemm<double>(const PackedB<double>&, const RowsA<double>&, const double*, Store, double*,
                                  int64_t, int64_t, int64_t, Columns);

}  // namespace fg
