// packed_gemm (kernels/linalg/packed_gemm.h), the per-step product of the recurrent layers, called
// directly at every instruction-set level the machine runs: float32 and float64, B stored either
// way, row counts around each level's register block (4-8 rows, blocks of near-equal size), column
// counts around its panel width (partial last panels), columns in groups (a recurrence's gates),
// leading dimensions past the matrix, bias, accumulation, against a float64 loop; the same bits
// from one call over every panel and from a call per panel. Operands read in place (B's rows or
// A's rows at offsets, as a convolution reads its padded image) and wide columns (Columns: lines
// of `stride` of which `keep` are stored), nothing written outside the kept columns.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/linalg/packed_gemm.h"

namespace fg {
namespace {

template <class T>
struct Operands {
  int64_t M, N, K, lda, ldb, ldc;
  bool trans_b;
  std::vector<T> a, b, bias, c;
};

template <class T>
Operands<T> make(int64_t M, int64_t N, int64_t K, bool trans_b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist;
  Operands<T> o{M, N, K, K + 3, (trans_b ? K : N) + 2, N + 1, trans_b, {}, {}, {}, {}};
  o.a.resize(M * o.lda), o.b.resize((trans_b ? N : K) * o.ldb), o.bias.resize(N), o.c.resize(M * o.ldc);
  for (auto* v : {&o.a, &o.b, &o.bias, &o.c})
    for (T& x : *v) x = static_cast<T>(dist(rng));
  return o;
}

// C as packed_gemm leaves it, and the float64 reference of the same.
template <class T>
void check(const Operands<T>& o, bool with_bias, Store store, int64_t groups = 1) {
  std::vector<T> c = o.c, c2 = o.c;
  const T* bias = with_bias ? o.bias.data() : nullptr;
  const PackedB<T> packed = pack_b(o.trans_b, o.K, o.N, o.b.data(), o.ldb, groups);
  const RowsA<T> a = prepare_a(packed, o.M, o.a.data(), o.lda);
  const int64_t count = groups * packed.group_panels();
  packed_gemm(packed, a, bias, store, c.data(), o.ldc, 0, count);
  for (int64_t p = count - 1; p >= 0; --p) packed_gemm(packed, a, bias, store, c2.data(), o.ldc, p, p + 1);
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (int64_t i = 0; i < o.M; ++i)
    for (int64_t j = 0; j < o.ldc; ++j) {
      const T got = c[i * o.ldc + j];
      ASSERT_EQ(got, c2[i * o.ldc + j]) << "a call per panel changed C(" << i << ", " << j << ")";
      if (j >= o.N) {
        ASSERT_EQ(got, o.c[i * o.ldc + j]) << "wrote past the row at column " << j;
        continue;
      }
      double want = store == Store::Accumulate ? double(o.c[i * o.ldc + j]) : 0.0, scale = 1.0;
      if (bias) want += double(bias[j]);
      for (int64_t k = 0; k < o.K; ++k) {
        const double p = double(o.a[i * o.lda + k]) * double(o.trans_b ? o.b[j * o.ldb + k] : o.b[k * o.ldb + j]);
        want += p, scale += std::abs(p);
      }
      ASSERT_NEAR(double(got), want, tol * scale) << "C(" << i << ", " << j << ")";
    }
}

template <class T>
void every_shape() {
  uint32_t seed = 0;
  for (int64_t M : {1, 2, 5, 6, 7, 8, 9, 13, 32})
    for (int64_t N : {1, 5, 8, 12, 16, 33, 48, 100})
      for (int64_t K : {1, 3, 17, 64})
        for (bool trans_b : {true, false}) {
          SCOPED_TRACE(testing::Message() << isa_name(cpu_isa()) << " " << sizeof(T) * 8 << "-bit M=" << M
                                          << " N=" << N << " K=" << K << " trans_b=" << trans_b);
          const Operands<T> o = make<T>(M, N, K, trans_b, ++seed);
          check(o, seed % 2 == 0, Store::Overwrite);
          check(o, seed % 2 == 1, Store::Accumulate);
          for (int64_t groups : {3, 4})
            if (N % groups == 0) check(o, seed % 2 == 0, Store::Overwrite, groups);
        }
  for (bool trans_b : {true, false}) {  // a recurrence's product: 4 gates of 250 units
    SCOPED_TRACE(testing::Message() << isa_name(cpu_isa()) << " " << sizeof(T) * 8 << "-bit 32x1000x300");
    check(make<T>(32, 1000, 300, trans_b, ++seed), true, Store::Overwrite, 4);
  }
}

// B (K, N) read in place (rows at offsets into `src`) or A (M, K) so (with_a), C's columns wide
// (keep of every stride, lines enough for N), against a float64 loop over the same values.
template <class T>
void check_in_place(int64_t M, int64_t K, int64_t keep, int64_t stride, bool in_place_a, Store store, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist;
  const int64_t lines = 3, N = (lines - 1) * stride + keep, ldc = lines * keep + 2;
  const int64_t rows = in_place_a ? M : K, length = in_place_a ? K : N;
  std::vector<T> src(rows * 7 + length + 64), dense((in_place_a ? K * N : M * K)), c(M * ldc);
  for (auto* v : {&src, &dense, &c})
    for (T& x : *v) x = static_cast<T>(dist(rng));
  std::vector<int64_t> offsets(rows);
  for (int64_t r = 0; r < rows; ++r) offsets[r] = (r * 7 + 3 * r * r) % (rows * 7);  // overlapping, out of order
  auto a_at = [&](int64_t i, int64_t k) { return in_place_a ? src[offsets[i] + k] : dense[i * K + k]; };
  auto b_at = [&](int64_t k, int64_t j) { return in_place_a ? dense[k * N + j] : src[offsets[k] + j]; };
  const PackedB<T> b = in_place_a ? pack_b(false, K, N, dense.data(), N) : in_place_b(K, N, src.data(), offsets.data());
  const RowsA<T> a = in_place_a ? prepare_a(b, M, src.data(), offsets.data()) : prepare_a(b, M, dense.data(), K);
  std::vector<T> got = c;
  packed_gemm(b, a, static_cast<const T*>(nullptr), store, got.data(), ldc, 0, b.group_panels(), Columns{keep, stride});
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      if (j % stride >= keep) continue;
      const int64_t at = i * ldc + j / stride * keep + j % stride;
      double want = store == Store::Accumulate ? double(c[at]) : 0.0, scale = 1.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(a_at(i, k)) * double(b_at(k, j));
        want += p, scale += std::abs(p);
      }
      ASSERT_NEAR(double(got[at]), want, tol * scale) << "C(" << i << ", " << j << ")";
    }
    for (int64_t j = lines * keep; j < ldc; ++j) ASSERT_EQ(got[i * ldc + j], c[i * ldc + j]) << "wrote past the lines";
  }
}

template <class T>
void every_in_place_shape() {
  uint32_t seed = 100;
  for (int64_t M : {1, 7, 13, 33})
    for (int64_t K : {1, 9, 27})
      for (auto [keep, stride] : {std::pair<int64_t, int64_t>{3, 5}, {32, 34}, {16, 16}, {7, 40}, {1, 2}})
        for (bool in_place_a : {false, true}) {
          SCOPED_TRACE(testing::Message() << isa_name(cpu_isa()) << " " << sizeof(T) * 8 << "-bit M=" << M << " K="
                                          << K << " keep " << keep << " of " << stride << " in place "
                                          << (in_place_a ? "A" : "B"));
          check_in_place<T>(M, K, keep, stride, in_place_a, Store::Overwrite, ++seed);
          check_in_place<T>(M, K, keep, stride, in_place_a, Store::Accumulate, ++seed);
        }
}

TEST(PackedGemm, ReadsInPlaceAndStoresWideColumnsAtEveryLevel) {
  const Isa saved = cpu_isa();
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa < cpu_isa_baseline() || isa > cpu_isa_machine()) continue;
    set_cpu_isa(isa_name(isa));
    every_in_place_shape<float>();
    every_in_place_shape<double>();
  }
  set_cpu_isa(isa_name(saved));
}

TEST(PackedGemm, MatchesALoopAtEveryLevelOnEveryEdge) {
  const Isa saved = cpu_isa();
  int levels = 0;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa < cpu_isa_baseline() || isa > cpu_isa_machine()) continue;
    set_cpu_isa(isa_name(isa)), ++levels;
    every_shape<float>();
    every_shape<double>();
  }
  set_cpu_isa(isa_name(saved));
  EXPECT_GE(levels, 1);
}

}  // namespace
}  // namespace fg
