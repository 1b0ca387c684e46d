// packed_gemm (kernels/linalg/packed_gemm.h), the per-step product of the recurrent layers, called
// directly at every instruction-set level the machine runs: float32 and float64, B stored either
// way, row counts around each level's register block (4-8 rows, blocks of near-equal size), column
// counts around its panel width (partial last panels), columns in groups (a recurrence's gates),
// leading dimensions past the matrix, bias, accumulation, against a float64 loop; the same bits
// from one call over every panel and from a call per panel.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
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
