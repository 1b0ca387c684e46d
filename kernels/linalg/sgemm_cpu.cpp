#include "kernels/linalg/sgemm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <utility>

#include "flowgrad/base/errors.h"
#include "flowgrad/base/parallel.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/common/functors.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FG_SGEMM_AVX512 1
#include <immintrin.h>
#else
#define FG_SGEMM_AVX512 0
#endif

namespace fg {

bool sgemm_avx512_supported() {
#if FG_SGEMM_AVX512
  return cpu_isa() == Isa::Avx512;  // the machine has it and FLOWGRAD_ISA does not ask for less
#else
  return false;
#endif
}

// Up to 8 rows: measured (2 threads) x W^T 8x784x512 25 us against 38 in tiles, 4x512x512 10.5
// against 22, 1x784x512 7.8 against OpenBLAS's 14.5; at 14 rows (two passes over W) 43 against 48
// but 10 against 7.7 at K = 128, and at 32 rows 1.1-1.6x slower.
constexpr int kDotRows = 8;

bool sgemm_avx512_dots(bool trans_a, bool trans_b, int64_t M) { return !trans_a && trans_b && M <= kDotRows; }

bool sgemm_avx512_splits_k(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  return !sgemm_avx512_dots(trans_a, trans_b, M) && K >= 2 * std::max(M, N);
}

bool sgemm_derivative_supported(UnaryFn act) {
  return act == UnaryFn::Gelu || act == UnaryFn::GeluTanh || act == UnaryFn::Silu;
}
bool sgemm_activation_supported(UnaryFn act) {
  switch (act) {
    case UnaryFn::Relu: case UnaryFn::Gelu: case UnaryFn::GeluTanh: case UnaryFn::Silu: case UnaryFn::Tanh:
    case UnaryFn::Sigmoid: return true;
    default: return false;
  }
}

namespace {
std::atomic<Sgemm>& sgemm_choice() {  // the kernel wherever the CPU has it, until set_sgemm says otherwise
  static std::atomic<Sgemm> choice{sgemm_avx512_supported() ? Sgemm::Avx512 : Sgemm::Blas};
  return choice;
}
}  // namespace

Sgemm set_sgemm(Sgemm which) {
  if (which == Sgemm::Avx512 && !sgemm_avx512_supported()) which = Sgemm::Blas;
  sgemm_choice() = which;
  return which;
}

Sgemm sgemm_in_use() { return sgemm_choice(); }

#if !FG_SGEMM_AVX512
void sgemm_avx512(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float, float*,
                  int64_t, const SgemmEpilogue&) {
  std::abort();  // gemm_cpu asks only where sgemm_avx512_supported()
}
#else

namespace {

// The register tile: kMR rows of C (one broadcast of A each) by kNR columns (two vectors of B):
// 28 accumulators and 2 vectors of B in the 32 registers. K is cut into blocks of at most kKC (a
// packed row group, kKC x kMR floats, stays in L1), M into blocks of kMC rows packed at once, and
// N into blocks of at most kNC columns (the packed block of B, kKC x kNC floats, stays in L2); K
// and N evenly: 784 is two blocks of 392, not 384 + 384 + 16.
constexpr int kMR = 14, kNR = 32;
constexpr int64_t kKC = 384, kNC = 1024;
// Rows of A packed at a time (24 row groups; with kKC, 516 KiB in L2).
constexpr int64_t kMC = 24 * kMR;
// A band of at most this many columns reads a row-major A in place, unpacked: packing a row group
// costs about what its few column groups then save. Measured (2 threads, the 2-core Xeon): x W^T
// 1024 x 512 x 128 343 -> 317 us, 1024 x 384 x 128 251 -> 235 us, 2048 x 512 x 128 693 -> 653 us,
// 192 columns 1-2% faster, 256 columns 1-5% slower (512 x 784 x 512's column bands).
constexpr int64_t kInPlaceCols = 6 * kNR;
// Products with fewer multiply-adds than this run on the calling thread alone.
constexpr int64_t kSerialWork = int64_t{1} << 18;

// A packed block, one of each kind per thread, grown as needed and kept.
class Block {
 public:
  float* get(int64_t floats) {
    if (floats > capacity_) {
      data_.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(floats) * sizeof(float))));
      FG_ASSERT(data_ && "sgemm: out of memory for a packed block");
      capacity_ = floats;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t capacity_ = 0;
};
thread_local Block t_block_a, t_block_b, t_block_sums, t_block_transposed;

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
// GCC 12 reports the self-initialised `__Y = __Y` inside its own _mm512_undefined_ps (which the
// unpack and extract intrinsics pass as their unused source) as an uninitialised read once inlined
// at -O3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

__mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

// r[i] becomes column i of the 16 x 16 block whose row i r[i] was.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

// Reads `count` (<= 16) rows of a row-major matrix, `width` (<= 16) floats each from column k,
// and returns them transposed: r[q] holds column k + q of the rows (rows past `count` zero).
// Contiguous row reads instead of a strided gather per column: several times fewer instructions,
// and streams the hardware prefetcher follows when the operand is cold.
inline void load_transposed(const float* rows, int64_t ld, int count, int64_t width, __m512 r[16]) {
  const __mmask16 valid = lanes(width);
  for (int i = 0; i < 16; ++i) r[i] = i < count ? _mm512_maskz_loadu_ps(valid, rows + i * ld) : _mm512_setzero_ps();
  transpose16(r);
}

// Storage rows of a transposed A prefetched ahead of its packing: a row group's block is a short
// run of each row (336 floats of a 1024-float row in the LSTM's weight gradients), which the
// hardware prefetchers did not follow from memory. 4 rows ahead took those gradients from
// 4.72-4.79 to 4.30-4.51 ms (1024x1600x256) and 1.38 to 1.19-1.24 ms (x 64) on one Zen 5 core
// inside the step, and 0.66-0.87 to 0.63-0.64 ms (x 64) on two; 8 ahead was 2-6% slower than 4.
constexpr int64_t kPackAhead = 4;

// Rows [m0, m0 + rows) of A over columns [k0, k0 + kc), for rows of kMR: row group g is kc groups
// of kMR floats at dst + g * kc * kMR, group k holding A[m0 + g kMR .. + kMR, k0 + k] (rows past
// `rows` zero). A stored (K, M) (ta) is read one storage row at a time, each feeding every row
// group: sequential reads, where a row group at a time would touch a page per k. Its stores are
// whole vectors where they can be: a k's 14 floats and 2 more over the first 2 of the next k,
// which that k then writes (masked: a row group's last k, and the loads that would pass the last
// row). On two threads of a Zen 5 EPYC, a cold 1024 x 1600 x 64 product with A stored so took
// 0.82-1.12 ms with every store masked and 0.69-1.05 ms so (best of 40, four runs each), and the
// LSTM step's weight gradients 2-4% less; a row-major A's packing, done the same way, measured no
// different.
void pack_a(bool ta, const float* A, int64_t lda, int64_t m0, int64_t rows, int64_t k0, int64_t kc, float* dst) {
  const __mmask16 group = lanes(kMR);
  const int64_t groups = (rows + kMR - 1) / kMR;
  if (ta) {
    const int64_t whole = rows >= 16 ? (rows - 16) / kMR + 1 : 0;  // groups whose 16-float load stays in the rows
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + (k0 + k) * lda + m0;
      if (k + kPackAhead < kc)
        for (int64_t m = 0; m < rows; m += 16) _mm_prefetch(reinterpret_cast<const char*>(src + kPackAhead * lda + m), _MM_HINT_T0);
      float* out = dst + k * kMR;
      if (k + 1 < kc) {
        for (int64_t g = 0; g < whole; ++g) _mm512_storeu_ps(out + g * kc * kMR, _mm512_loadu_ps(src + g * kMR));
      } else {
        for (int64_t g = 0; g < whole; ++g)
          _mm512_mask_storeu_ps(out + g * kc * kMR, group, _mm512_loadu_ps(src + g * kMR));
      }
      for (int64_t g = whole; g < groups; ++g)
        _mm512_mask_storeu_ps(out + g * kc * kMR, group, _mm512_maskz_loadu_ps(lanes(rows - g * kMR), src + g * kMR));
    }
    return;
  }
  __m512 r[16];
  for (int64_t g = 0; g < groups; ++g, dst += kc * kMR) {
    const int count = static_cast<int>(std::min<int64_t>(kMR, rows - g * kMR));
    for (int64_t k = 0; k < kc; k += 16) {
      const int64_t width = std::min<int64_t>(16, kc - k);
      load_transposed(A + (m0 + g * kMR) * lda + k0 + k, lda, count, width, r);
      for (int64_t q = 0; q < width; ++q) _mm512_mask_storeu_ps(dst + (k + q) * kMR, group, r[q]);
    }
  }
}

// Columns [j0, j0 + cols) of B over rows [k0, k0 + kc) as kc groups of kNR floats, columns past
// `cols` zero: group k holds B[k0 + k, j0 .. j0 + kNR]. dst is 64-byte aligned.
void pack_b(bool tb, const float* B, int64_t ldb, int64_t j0, int cols, int64_t k0, int64_t kc, float* dst) {
  if (!tb) {
    const __mmask16 low = lanes(cols), high = lanes(cols - 16);
    const float* src = B + k0 * ldb + j0;
    for (int64_t k = 0; k < kc; ++k, src += ldb) {
      _mm512_store_ps(dst + k * kNR, _mm512_maskz_loadu_ps(low, src));
      _mm512_store_ps(dst + k * kNR + 16, _mm512_maskz_loadu_ps(high, src + 16));
    }
    return;
  }
  // Row k of B lies down a column of its (N, K) storage: 16 of its rows at a time, transposed.
  __m512 r[16];
  for (int half = 0; half < 2; ++half) {
    const int count = std::clamp(cols - 16 * half, 0, 16);
    for (int64_t k = 0; k < kc; k += 16) {
      const int64_t width = std::min<int64_t>(16, kc - k);
      if (count > 0) load_transposed(B + (j0 + 16 * half) * ldb + k0 + k, ldb, count, width, r);
      for (int64_t q = 0; q < width; ++q)
        _mm512_store_ps(dst + (k + q) * kNR + 16 * half, count > 0 ? r[q] : _mm512_setzero_ps());
    }
  }
}

// The row group's A as the tile reads it, value (I, k) at k = 0, 1, ... as next() steps along K:
// packed (kMR floats per k), or up to kMR rows of a row-major A read in place, ld floats apart,
// through five row pointers so that every row is one pointer plus ld times 1, 2, 4 or 8 (an x86
// address with a scaled index: no register per row).
struct PackedRows {
  const float* a;
  template <int I> float at() const { return a[I]; }
  void next() { a += kMR; }
};
template <int Rows>
struct InPlaceRows {
  const float *r0, *r3, *r6, *r9, *r12;  // rows 0, 3, 6, 9, 12 (row 0 where the group is shorter)
  int64_t ld;
  InPlaceRows(const float* a, int64_t lda)
      : r0(a), r3(Rows > 3 ? a + 3 * lda : a), r6(Rows > 6 ? a + 6 * lda : a), r9(Rows > 9 ? a + 9 * lda : a),
        r12(Rows > 12 ? a + 12 * lda : a), ld(lda) {}
  template <int I> float at() const {
    static_assert(I < Rows && kMR == 14, "rows 0-13 from the five pointers");
    if constexpr (I == 0 || I == 1 || I == 2 || I == 4 || I == 8) return r0[I * ld];
    else if constexpr (I == 3 || I == 5 || I == 7 || I == 11) return r3[(I - 3) * ld];
    else if constexpr (I == 6 || I == 10) return r6[(I - 6) * ld];
    else if constexpr (I == 9 || I == 13) return r9[(I - 9) * ld];
    else return r12[0];
  }
  void next() { ++r0, ++r3, ++r6, ++r9, ++r12; }
};

// The column group's B as the tile reads it, the two vectors of row k at a time as next() steps
// along K: packed (kNR floats per k, aligned), or read in place from a row-major B, rows ld apart,
// lanes past the group's `cols` columns masked off (never read), each row fetched kAhead rows early
// (rows a page apart or more, a stride the hardware prefetcher did not follow).
struct PackedCols {
  const float* b;
  __m512 lo() const { return _mm512_load_ps(b); }
  __m512 hi() const { return _mm512_load_ps(b + 16); }
  void next() { b += kNR; }
};
struct InPlaceCols {
  static constexpr int64_t kAhead = 8;
  const float* b;
  int64_t ld;
  __mmask16 low, high;
  __m512 lo() const { return _mm512_maskz_loadu_ps(low, b); }
  __m512 hi() const { return _mm512_maskz_loadu_ps(high, b + 16); }
  void next() {
    b += ld;
    _mm_prefetch(reinterpret_cast<const char*>(b + kAhead * ld), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + kAhead * ld + 16), _MM_HINT_T0);
  }
};

template <class A, std::size_t... I>
inline __attribute__((always_inline)) void fma_rows(const A& a, __m512 b0, __m512 b1, __m512* lo, __m512* hi,
                                                    std::index_sequence<I...>) {
  ((lo[I] = _mm512_fmadd_ps(_mm512_set1_ps(a.template at<I>()), b0, lo[I]),
    hi[I] = _mm512_fmadd_ps(_mm512_set1_ps(a.template at<I>()), b1, hi[I])),
   ...);
}

// C[0 .. Rows, 0 .. cols] (+)= the kc products of a row group of A and a packed column group;
// Rows < kMR for the last row group, so 128 rows cost 128 rows' work, not 140.
template <int Rows, class A, class B>
void tile(int64_t kc, A a, B b, float* c, int64_t ldc, int cols, bool accumulate, const float* bias) {
  __m512 lo[Rows], hi[Rows];
  // C's lines, fetched while the products run; with a short K the prefetches only held up the
  // tile (512 x 10 x 512: 37-44 -> 29-32 us).
  const bool fetch = kc >= 64;
#pragma GCC unroll 14
  for (int i = 0; i < Rows; ++i) {
    lo[i] = hi[i] = _mm512_setzero_ps();
    if (fetch) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
    }
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, a.next(), b.next())
    fma_rows(a, b.lo(), b.hi(), lo, hi, std::make_index_sequence<Rows>{});
  const __mmask16 low = lanes(cols), high = lanes(cols - 16);
  const __m512 bias_lo = bias ? _mm512_maskz_loadu_ps(low, bias) : _mm512_setzero_ps();
  const __m512 bias_hi = bias ? _mm512_maskz_loadu_ps(high, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 14
  for (int i = 0; i < Rows; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      lo[i] = _mm512_add_ps(lo[i], _mm512_maskz_loadu_ps(low, row));
      hi[i] = _mm512_add_ps(hi[i], _mm512_maskz_loadu_ps(high, row + 16));
    } else if (bias) {
      lo[i] = _mm512_add_ps(lo[i], bias_lo);
      hi[i] = _mm512_add_ps(hi[i], bias_hi);
    }
    _mm512_mask_storeu_ps(row, low, lo[i]);
    _mm512_mask_storeu_ps(row + 16, high, hi[i]);
  }
}

// out[i, j] = f(c[i, j]) over a stored tile (still in L1); the loops vectorise like the
// elementwise kernels' (the same functors). In place (out == c) through one pointer: two restrict
// pointers to the same floats would be undefined, and a runtime overlap check would go scalar.
template <class F>
void activate_tile(F f, float* c, int64_t ldc, float* out, int64_t ldo, int64_t rows, int cols) {
  for (int64_t i = 0; i < rows; ++i) {
    if (out == c) {
      float* row = c + i * ldc;
      for (int j = 0; j < cols; ++j) row[j] = f(row[j]);
    } else {
      const float* __restrict src = c + i * ldc;
      float* __restrict dst = out + i * ldo;
      for (int j = 0; j < cols; ++j) dst[j] = f(src[j]);
    }
  }
}

// out[i, j] = f(v), c[i, j] = grad(1, v) for v = c[i, j]: the value and its derivative in one pass.
template <class F, class Grad>
void activate_tile(F f, Grad grad, float* c, int64_t ldc, float* out, int64_t ldo, int64_t rows, int cols) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict row = c + i * ldc;
    float* __restrict dst = out + i * ldo;
    for (int j = 0; j < cols; ++j) {
      const float v = row[j];
      dst[j] = f(v);
      row[j] = grad(1.0f, v);
    }
  }
}

void activate(UnaryFn act, bool derivative, float* c, int64_t ldc, float* out, int64_t ldo, int64_t rows, int cols) {
  if (derivative) {
    switch (act) {
      case UnaryFn::Gelu: return activate_tile(fn::Gelu{}, fn::GeluGrad{}, c, ldc, out, ldo, rows, cols);
      case UnaryFn::GeluTanh: return activate_tile(fn::GeluTanh{}, fn::GeluTanhGrad{}, c, ldc, out, ldo, rows, cols);
      case UnaryFn::Silu: return activate_tile(fn::Silu{}, fn::SiluGrad{}, c, ldc, out, ldo, rows, cols);
      default: FG_ASSERT(false && "sgemm: a derivative sgemm_derivative_supported() rejects");
    }
  }
  switch (act) {
    case UnaryFn::Relu: return activate_tile(fn::Relu{}, c, ldc, out, ldo, rows, cols);
    case UnaryFn::Gelu: return activate_tile(fn::Gelu{}, c, ldc, out, ldo, rows, cols);
    case UnaryFn::GeluTanh: return activate_tile(fn::GeluTanh{}, c, ldc, out, ldo, rows, cols);
    case UnaryFn::Silu: return activate_tile(fn::Silu{}, c, ldc, out, ldo, rows, cols);
    case UnaryFn::Tanh: return activate_tile(fn::Tanh{}, c, ldc, out, ldo, rows, cols);
    case UnaryFn::Sigmoid: return activate_tile(fn::Sigmoid{}, c, ldc, out, ldo, rows, cols);
    default: FG_ASSERT(false && "sgemm: an activation sgemm_activation_supported() rejects");
  }
}

// The epilogue's activation over rows x cols of C at (row, col): into `out` at the same place
// (C keeping the product, or its derivative), or in place.
void activate(const SgemmEpilogue& e, float* c, int64_t ldc, int64_t row, int64_t col, int64_t rows, int cols) {
  if (!e.act) return;
  if (e.out) activate(*e.act, e.derivative, c, ldc, e.out + row * e.ldo + col, e.ldo, rows, cols);
  else activate(*e.act, false, c, ldc, c, ldc, rows, cols);
}

// A row group of `rows` (1 .. kMR) against a column group: packed A and B, A read in place
// (row-major, lda), or B read in place (row-major, ldb). kTiles[r - 1]: r rows.
using Tile = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                      int cols, bool accumulate, const float* bias);
template <int Rows>
void packed_tile(int64_t kc, const float* a, int64_t, const float* b, int64_t, float* c, int64_t ldc, int cols,
                 bool accumulate, const float* bias) {
  tile<Rows>(kc, PackedRows{a}, PackedCols{b}, c, ldc, cols, accumulate, bias);
}
template <int Rows>
void in_place_tile(int64_t kc, const float* a, int64_t lda, const float* b, int64_t, float* c, int64_t ldc, int cols,
                   bool accumulate, const float* bias) {
  tile<Rows>(kc, InPlaceRows<Rows>(a, lda), PackedCols{b}, c, ldc, cols, accumulate, bias);
}
template <int Rows>
void b_in_place_tile(int64_t kc, const float* a, int64_t, const float* b, int64_t ldb, float* c, int64_t ldc,
                     int cols, bool accumulate, const float* bias) {
  tile<Rows>(kc, PackedRows{a}, InPlaceCols{b, ldb, lanes(cols), lanes(cols - 16)}, c, ldc, cols, accumulate, bias);
}
enum class Operands { Packed, AInPlace, BInPlace };
template <Operands Kind, size_t... Rows>
constexpr std::array<Tile, sizeof...(Rows)> tiles_for(std::index_sequence<Rows...>) {
  if constexpr (Kind == Operands::AInPlace) return {&in_place_tile<static_cast<int>(Rows) + 1>...};
  else if constexpr (Kind == Operands::BInPlace) return {&b_in_place_tile<static_cast<int>(Rows) + 1>...};
  else return {&packed_tile<static_cast<int>(Rows) + 1>...};
}
constexpr auto kTiles = tiles_for<Operands::Packed>(std::make_index_sequence<kMR>());
constexpr auto kInPlaceTiles = tiles_for<Operands::AInPlace>(std::make_index_sequence<kMR>());
constexpr auto kBInPlaceTiles = tiles_for<Operands::BInPlace>(std::make_index_sequence<kMR>());

// One thread's product: the blocks of B packed one at a time, each row group of A packed once
// per block (or, row-major in a band of at most kInPlaceCols columns, read in place) and run
// against all of its column groups. A row-major B multiplied by one row group (M <= kMR: a weight
// gradient of a few classes, a small batch) is read in place: packing it would copy every value
// for its one use.
void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const SgemmEpilogue& epilogue) {
  const int64_t k_parts = (K + kKC - 1) / kKC, k_step = (K + k_parts - 1) / k_parts;
  const int64_t n_parts = (N + kNC - 1) / kNC, n_step = ((N + n_parts - 1) / n_parts + kNR - 1) / kNR * kNR;
  float* packed_b = t_block_b.get(k_step * n_step);
  float* packed_a = t_block_a.get(k_step * std::min(kMC, (M + kMR - 1) / kMR * kMR));
  for (int64_t j0 = 0; j0 < N; j0 += n_step) {
    const int64_t nc = std::min(n_step, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += k_step) {
      const int64_t kc = std::min(k_step, K - k0);
      const bool first = k0 == 0, last = k0 + kc == K;
      const bool b_in_place = !trans_b && M <= kMR;
      for (int64_t j = 0; j < nc && !b_in_place; j += kNR)
        pack_b(trans_b, B, ldb, j0 + j, static_cast<int>(std::min<int64_t>(kNR, nc - j)), k0, kc, packed_b + j * kc);
      const bool in_place = !trans_a && nc <= kInPlaceCols && !b_in_place;
      for (int64_t m0 = 0; m0 < M; m0 += kMC) {
        const int64_t mc = std::min(kMC, M - m0);
        if (!in_place) pack_a(trans_a, A, lda, m0, mc, k0, kc, packed_a);
        for (int64_t i = 0; i < mc; i += kMR) {
          const int64_t rows = std::min<int64_t>(kMR, mc - i);
          const Tile run = (b_in_place ? kBInPlaceTiles : in_place ? kInPlaceTiles : kTiles)[rows - 1];
          const float* group = in_place ? A + (m0 + i) * lda + k0 : packed_a + i * kc;
          for (int64_t j = 0; j < nc; j += kNR) {
            const int cols = static_cast<int>(std::min<int64_t>(kNR, nc - j));
            float* c = C + (m0 + i) * ldc + j0 + j;
            const float* panel = b_in_place ? B + k0 * ldb + j0 + j : packed_b + j * kc;
            run(kc, group, lda, panel, ldb, c, ldc, cols, !first || beta != 0.f,
                first && epilogue.bias ? epilogue.bias + j0 + j : nullptr);
            if (last) activate(epilogue, c, ldc, m0 + i, j0 + j, rows, cols);
          }
        }
      }
    }
  }
}

// The sum of v's lanes, by halves.
inline float lane_sum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// Few rows of a row-major A against a B stored transposed (x W^T with W row-major: a small batch
// through a linear layer): C[i, j] is the dot product of A's row i and W's row j, both contiguous
// along K, so nothing is packed and W streams once while A's rows stay in L1. R rows of A against
// V rows of W at a time accumulate 16 lanes of K each (R V <= 16 accumulators), then each sums its
// lanes; C's value then gets beta C and the bias. Loops over the accumulators are unrolled: an
// accumulator indexed by a variable lived on the stack (8x784x512: 38 us, unrolled 25).
template <int R, int V>
inline __attribute__((always_inline)) void dot_step(const float* A, int64_t lda, const float* w0, int64_t ldw,
                                                    int64_t k, __mmask16 valid, __m512 (&acc)[V][R]) {
  __m512 w[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) w[v] = _mm512_maskz_loadu_ps(valid, w0 + v * ldw + k);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_maskz_loadu_ps(valid, A + r * lda + k);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[v][r] = _mm512_fmadd_ps(a, w[v], acc[v][r]);
  }
}
template <int R, int V>
void dot_block(int64_t K, const float* A, int64_t lda, const float* W, int64_t ldw, int64_t j, float beta, float* C,
               int64_t ldc, const float* bias) {
  __m512 acc[V][R];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[v][r] = _mm512_setzero_ps();
  const float* w0 = W + j * ldw;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) dot_step<R, V>(A, lda, w0, ldw, k, 0xffff, acc);
  if (k < K) dot_step<R, V>(A, lda, w0, ldw, k, lanes(K - k), acc);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float& c = C[r * ldc + j + v];
      const float sum = lane_sum(acc[v][r]);
      c = (beta != 0.f ? c + sum : sum) + (bias ? bias[j + v] : 0.f);
    }
}
template <int R>
void dot_rows(int64_t K, const float* A, int64_t lda, const float* W, int64_t ldw, int64_t j0, int64_t j1, float beta,
              float* C, int64_t ldc, const float* bias) {
  int64_t j = j0;
  for (; j + 2 <= j1; j += 2) dot_block<R, 2>(K, A, lda, W, ldw, j, beta, C, ldc, bias);
  if (j < j1) dot_block<R, 1>(K, A, lda, W, ldw, j, beta, C, ldc, bias);
}
using DotRows = void (*)(int64_t, const float*, int64_t, const float*, int64_t, int64_t, int64_t, float, float*, int64_t,
                         const float*);
template <size_t... R>
constexpr std::array<DotRows, sizeof...(R)> dots_for(std::index_sequence<R...>) {
  return {&dot_rows<static_cast<int>(R) + 1>...};
}
constexpr auto kDots = dots_for(std::make_index_sequence<kDotRows>());

}  // namespace

void sgemm_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const SgemmEpilogue& epilogue) {
  FG_ASSERT((!epilogue.bias || beta == 0.f) && "sgemm: a bias only with beta 0");
  if (sgemm_avx512_dots(trans_a, trans_b, M)) {
    // A few rows through W^T: dot products (dot_block), the rows of W split over the threads.
    const int64_t parts = in_parallel_region() || M * N * K < kSerialWork ? 1 : std::min<int64_t>(pool_threads(), N);
    parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t lo = N * p / parts, hi = N * (p + 1) / parts;
        kDots[M - 1](K, A, lda, B, ldb, lo, hi, beta, C, ldc, epilogue.bias);
        activate(epilogue, C + lo, ldc, 0, lo, M, static_cast<int>(hi - lo));
      }
    });
    return;
  }
  if (N < kNR && M >= kNR) {
    // Fewer columns than a tile is wide (a classifier's head): C^T = B^T A^T fills the tiles, into
    // this thread's buffer; C is then its transpose (+ beta C, + the bias), activated.
    float* t = t_block_transposed.get(N * M);
    sgemm_avx512(!trans_b, !trans_a, N, M, K, B, ldb, A, lda, 0.f, t, M);
    __m512 r[16];
    for (int64_t i0 = 0; i0 < M; i0 += 16) {  // blocks of 16 rows of C by up to 16 columns
      const int64_t width = std::min<int64_t>(16, M - i0);
      for (int64_t j0 = 0; j0 < N; j0 += 16) {
        const int count = static_cast<int>(std::min<int64_t>(16, N - j0));
        const __mmask16 cols = lanes(count);
        const __m512 add = epilogue.bias ? _mm512_maskz_loadu_ps(cols, epilogue.bias + j0) : _mm512_setzero_ps();
        load_transposed(t + j0 * M + i0, M, count, width, r);
        for (int64_t q = 0; q < width; ++q) {
          float* row = C + (i0 + q) * ldc + j0;
          __m512 v = _mm512_add_ps(r[q], add);
          if (beta != 0.f) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(cols, row));
          _mm512_mask_storeu_ps(row, cols, v);
        }
      }
    }
    activate(epilogue, C, ldc, 0, 0, M, static_cast<int>(N));
    return;
  }
  const int threads = in_parallel_region() || M * N * K < kSerialWork ? 1 : pool_threads();
  if (threads == 1) return sgemm_serial(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, epilogue);
  if (sgemm_avx512_splits_k(trans_a, trans_b, M, N, K) && !epilogue.bias && !epilogue.act) {
    // A long K (a weight gradient summed over a batch): each thread multiplies its own stretch of
    // K (the rows of the batch it likely produced), the first into C, the others into partial
    // sums added at the end. The sum's order then depends on the thread count.
    const int64_t parts = std::clamp<int64_t>(K / kMR, 1, threads);
    float* partial = t_block_sums.get((parts - 1) * M * N);
    parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t lo = K * p / parts, hi = K * (p + 1) / parts;
        sgemm_serial(trans_a, trans_b, M, N, hi - lo, A + (trans_a ? lo * lda : lo), lda,
                     B + (trans_b ? lo : lo * ldb), ldb, p == 0 ? beta : 0.f,
                     p == 0 ? C : partial + (p - 1) * M * N, p == 0 ? ldc : N, {});
      }
    });
    parallel_for(M, std::max<int64_t>(1, (int64_t{1} << 14) / N), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t p = 1; p < parts; ++p) {
          float* __restrict row = C + i * ldc;
          const float* __restrict add = partial + (p - 1) * M * N + i * N;
          for (int64_t j = 0; j < N; ++j) row[j] += add[j];
        }
    });
    return;
  }
  // Each thread takes a band of C and packs what it reads itself, so the threads share nothing and
  // meet once. Bands of columns when N >= M (each thread packs all of A, the smaller operand to
  // read twice), else of rows (each packs all of B); band edges on whole register tiles.
  const bool by_columns = N >= M;
  const int64_t unit = by_columns ? kNR : kMR, units = ((by_columns ? N : M) + unit - 1) / unit;
  const int64_t bands = std::min<int64_t>(threads, units);
  parallel_for(bands, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = units * b / bands * unit, hi = std::min(by_columns ? N : M, units * (b + 1) / bands * unit);
      SgemmEpilogue band = epilogue;  // the band's own bias columns and output rows or columns
      if (by_columns && band.bias) band.bias += lo;
      if (band.out) band.out += by_columns ? lo : lo * band.ldo;
      if (by_columns)
        sgemm_serial(trans_a, trans_b, M, hi - lo, K, A, lda, B + (trans_b ? lo * ldb : lo), ldb, beta, C + lo, ldc,
                     band);
      else
        sgemm_serial(trans_a, trans_b, hi - lo, N, K, A + (trans_a ? lo : lo * lda), lda, B, ldb, beta,
                     C + lo * ldc, ldc, band);
    }
  });
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

#endif  // FG_SGEMM_AVX512

}  // namespace fg
