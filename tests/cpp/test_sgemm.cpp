// flowgrad's AVX-512 float32 GEMM (kernels/linalg/sgemm_cpu.cpp) called directly, on the shapes
// fg.matmul never sends it (gemm_cpu keeps small and skinny products on the BLAS): every edge of
// its 14 x 32 tile, of its K blocks (384), row blocks (336) and column blocks (1024), both
// transposes (a row-major B under at most 14 rows read in place; up to 8 rows against a transposed B
// as dot products), leading dimensions past the matrix, accumulation, the epilogue, K split over the
// threads, NaN and infinity, and thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "flowgrad/core/runtime.h"
#include "kernels/common/functors.h"
#include "kernels/linalg/sgemm.h"

namespace fg {
namespace {

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  int64_t pad = 0;  // extra elements per stored row: leading dimensions past the matrix
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Operands make(const Case& k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  Operands o;
  o.lda = (k.ta ? k.M : k.K) + k.pad;
  o.ldb = (k.tb ? k.K : k.N) + k.pad;
  o.ldc = k.N + k.pad;
  o.a.resize((k.ta ? k.K : k.M) * o.lda);
  o.b.resize((k.tb ? k.N : k.K) * o.ldb);
  o.c.resize(k.M * o.ldc);
  for (float& v : o.a) v = dist(rng);
  for (float& v : o.b) v = dist(rng);
  for (float& v : o.c) v = dist(rng);
  return o;
}

// The product in double, as C's expected values (beta 0 or 1).
std::vector<double> reference(const Case& k, const Operands& o, float beta) {
  std::vector<double> out(k.M * k.N);
  for (int64_t i = 0; i < k.M; ++i)
    for (int64_t j = 0; j < k.N; ++j) {
      double sum = beta != 0.f ? o.c[i * o.ldc + j] : 0.0;
      for (int64_t p = 0; p < k.K; ++p)
        sum += double(k.ta ? o.a[p * o.lda + i] : o.a[i * o.lda + p]) *
               double(k.tb ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j]);
      out[i * k.N + j] = sum;
    }
  return out;
}

void check(const Case& k, float beta) {
  Operands o = make(k, static_cast<uint32_t>(k.M * 131 + k.N * 7 + k.K));
  const std::vector<double> expected = reference(k, o, beta);
  const std::vector<float> before = o.c;
  sgemm_avx512(k.ta, k.tb, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, beta, o.c.data(), o.ldc);
  for (int64_t i = 0; i < k.M; ++i) {
    for (int64_t j = 0; j < k.N; ++j)
      ASSERT_NEAR(o.c[i * o.ldc + j], expected[i * k.N + j], 1e-4 * (std::sqrt(double(k.K)) + 1))
          << "C[" << i << ", " << j << "] of " << k.M << "x" << k.K << "x" << k.N << " ta " << k.ta << " tb " << k.tb
          << " pad " << k.pad << " beta " << beta;
    for (int64_t j = k.N; j < o.ldc; ++j)  // the padding past each row of C is never written
      ASSERT_EQ(o.c[i * o.ldc + j], before[i * o.ldc + j]);
  }
}

class OwnSgemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!sgemm_avx512_supported()) GTEST_SKIP() << "this CPU has no AVX-512 (or the build no kernel for it)";
    previous_ = num_threads();
  }
  void TearDown() override {
    if (previous_) set_num_threads(previous_);
  }
  int previous_ = 0;
};

TEST_F(OwnSgemm, EveryTileEdgeBothTransposesAndPaddedRows) {
  for (int threads : {1, 2})
    for (int64_t M : {1, 2, 8, 9, 13, 14, 15, 29, 64})  // up to 8 rows through a transposed B: dot products
      for (int64_t N : {1, 15, 16, 17, 32, 33, 70, 230})  // 230: a row-major A packed on one thread, else read in place
        for (int64_t K : {1, 7, 17, 40})
          for (int t = 0; t < 4; ++t) {
            set_num_threads(threads);
            const Case k{M, N, K, (t & 1) != 0, (t & 2) != 0, (M + N + K) % 3};
            check(k, 0.f);
            check(k, 1.f);
          }
}

TEST_F(OwnSgemm, SeveralKBlocksAndColumnBlocks) {
  set_num_threads(2);
  // K 785: three blocks of 262 (one short); N 1100: two column blocks; M 70: five whole row groups;
  // M 1000: row bands of 500, each two blocks of rows (336 + 164); M 10 and 14, B row-major: one
  // row group, B read in place (not packed) over every block.
  for (const Case& k : {Case{70, 1100, 785, false, false}, Case{70, 1100, 785, true, true, 5},
                        Case{10, 1100, 785, true, false, 3}, Case{14, 1100, 785, false, false},
                        Case{131, 96, 800, false, true}, Case{131, 96, 800, true, false, 3},
                        Case{1000, 40, 60, true, false, 1}, Case{1000, 40, 60, false, true}}) {
    check(k, 0.f);
    check(k, 1.f);
  }
}

void same_bits_at_any_thread_count(const Case& k) {
  const Operands o = make(k, 3);
  auto run = [&] {
    std::vector<float> c(k.M * o.ldc);
    sgemm_avx512(k.ta, k.tb, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), o.ldc);
    return c;
  };
  set_num_threads(1);
  const std::vector<float> one = run();
  set_num_threads(2);
  EXPECT_EQ(run(), one);
  std::vector<std::vector<float>> nested(2);
  parallel_for(2, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) nested[i] = run();
  });
  EXPECT_EQ(nested[0], one);
  EXPECT_EQ(nested[1], one);
}

TEST_F(OwnSgemm, SameBitsOnOneOrTwoThreadsAndFromInsideAParallelRegion) {
  for (const Case& k : {Case{200, 300, 500, false, true}, Case{5, 301, 500, false, true}})  // tiles, dot products
    same_bits_at_any_thread_count(k);
}

TEST_F(OwnSgemm, SplitKGivesTheSameBitsForTheSameThreadCount) {
  const Case k{40, 64, 900, true, false};  // a weight gradient: K long against M and N
  ASSERT_TRUE(sgemm_avx512_splits_k(k.ta, k.tb, k.M, k.N, k.K));
  const Operands o = make(k, 4);
  auto run = [&](float beta) {
    std::vector<float> c(o.c);
    sgemm_avx512(k.ta, k.tb, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, beta, c.data(), o.ldc);
    return c;
  };
  set_num_threads(2);
  const std::vector<float> two = run(1.f);
  EXPECT_EQ(run(1.f), two);
  set_num_threads(1);
  const std::vector<float> one = run(1.f);
  const std::vector<double> expected = reference(k, o, 1.f);
  for (int64_t i = 0; i < k.M; ++i)
    for (int64_t j = 0; j < k.N; ++j) {
      EXPECT_NEAR(two[i * o.ldc + j], expected[i * k.N + j], 1e-4 * std::sqrt(double(k.K)));
      EXPECT_NEAR(two[i * o.ldc + j], one[i * o.ldc + j], 1e-4 * std::sqrt(double(k.K)));
    }
  EXPECT_FALSE(sgemm_avx512_splits_k(false, false, 512, 512, 784));  // the MLP's products keep bands of C
  EXPECT_FALSE(sgemm_avx512_splits_k(false, true, 8, 64, 1024));   // a few rows through W^T: dot products
}

TEST_F(OwnSgemm, NanAndInfinityReachOnlyTheirRowsAndColumns) {
  const Case k{30, 40, 50, false, false};
  Operands o = make(k, 5);
  const float inf = std::numeric_limits<float>::infinity();
  o.a[3 * o.lda + 10] = std::numeric_limits<float>::quiet_NaN();  // row 3 of A
  o.b[20 * o.ldb + 35] = inf;                                      // column 35 of B
  for (int64_t p = 0; p < k.K; ++p) o.b[p * o.ldb + 35] = std::abs(o.b[p * o.ldb + 35]) + 1;
  for (int64_t p = 0; p < k.K; ++p) o.a[7 * o.lda + p] = std::abs(o.a[7 * o.lda + p]) + 1;  // row 7: all > 0
  std::vector<float> c(k.M * o.ldc, std::numeric_limits<float>::quiet_NaN());  // beta 0: never read
  sgemm_avx512(false, false, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), o.ldc);
  for (int64_t i = 0; i < k.M; ++i)
    for (int64_t j = 0; j < k.N; ++j) {
      const float v = c[i * o.ldc + j];
      if (i == 3) EXPECT_TRUE(std::isnan(v)) << j;
      else if (j == 35 && i == 7) EXPECT_EQ(v, inf);
      else if (j == 35) EXPECT_TRUE(std::isinf(v) || std::isnan(v)) << i;
      else EXPECT_TRUE(std::isfinite(v)) << i << ", " << j;
    }
}

TEST_F(OwnSgemm, EpilogueAddsTheBiasOnceThenTheActivationInPlaceOrIntoItsOwnOutput) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int threads : {1, 2})
    // Column bands (N >= M) offset the bias and the output per thread; row bands share the bias;
    // K 800 has three blocks, only the last one activates.
    // N 12 < 32 columns: the transposed product, the bias and activation added as it is transposed.
    // 6 rows through a transposed B: dot products, the bias added as each is stored.
    for (const Case& k : {Case{20, 300, 800, false, true}, Case{300, 45, 50, true, false, 2}, Case{5, 33, 9, false, false},
                          Case{70, 12, 40, false, true, 1}, Case{6, 71, 300, false, true, 1}}) {
      set_num_threads(threads);
      Operands o = make(k, 9);
      o.a[1 * (k.ta ? 1 : o.lda)] = nan;  // element (1, 0) of A: row 1 of C NaN, through every activation
      std::vector<float> bias(k.N);
      for (int64_t j = 0; j < k.N; ++j) bias[j] = 0.25f * static_cast<float>(j % 7) - 0.75f;
      const std::vector<double> product = reference(k, o, 0.f);
      const double tol = 1e-4 * (std::sqrt(double(k.K)) + 1);
      for (std::optional<UnaryFn> act : {std::optional<UnaryFn>(), std::optional(UnaryFn::Relu), std::optional(UnaryFn::Gelu)})
        for (bool separate : {false, true}) {
          std::vector<float> c(k.M * o.ldc, 123.f), out(k.M * k.N, 321.f);
          sgemm_avx512(k.ta, k.tb, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), o.ldc,
                       {bias.data(), act, separate ? out.data() : nullptr, k.N});
          for (int64_t i = 0; i < k.M; ++i)
            for (int64_t j = 0; j < k.N; ++j) {
              const float pre = c[i * o.ldc + j], got = act && separate ? out[i * k.N + j] : pre;
              const double want = product[i * k.N + j] + bias[j];
              if (i == 1) {
                EXPECT_TRUE(std::isnan(got)) << j;
                continue;
              }
              if (act && separate) {
                EXPECT_NEAR(pre, want, tol) << "C keeps the product: " << i << ", " << j;
              }
              const double expected = !act ? want
                                      : *act == UnaryFn::Relu ? std::max(want, 0.0)
                                                              : double(fn::Gelu{}(static_cast<float>(want)));
              EXPECT_NEAR(got, expected, tol * 1.2) << i << ", " << j;
            }
          if (!(act && separate)) {
            EXPECT_EQ(out[0], 321.f);  // no activation output asked for: none written
          }
        }
    }
  EXPECT_TRUE(sgemm_activation_supported(UnaryFn::GeluTanh));
  EXPECT_FALSE(sgemm_activation_supported(UnaryFn::Exp));
}

TEST_F(OwnSgemm, EpilogueKeepsTheDerivativeInCAndTheActivationInItsOutput) {
  // Each act with its backward functor: the output holds act(v) and C holds Grad(1, v) for the
  // product v the same kernel keeps with another activation (to rounding: this file is compiled
  // without FMA contraction; tests/plan/test_fuse_epilogues.py checks the bits against the plan's
  // ops).
  for (int threads : {1, 2})
    for (const Case& k : {Case{20, 300, 800, false, true}, Case{300, 45, 50, true, false, 2}, Case{70, 12, 40, false, true, 1},
                          Case{6, 71, 300, false, true, 1}}) {
      set_num_threads(threads);
      Operands o = make(k, 11);
      std::vector<float> plain(k.M * o.ldc), relu(k.M * k.N);  // an epilogue keeping the product: no split K
      sgemm_avx512(k.ta, k.tb, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, plain.data(), o.ldc,
                   {nullptr, UnaryFn::Relu, relu.data(), k.N});
      auto check = [&](UnaryFn act, auto f, auto grad) {
        ASSERT_TRUE(sgemm_derivative_supported(act));
        std::vector<float> c(k.M * o.ldc, 123.f), out(k.M * k.N, 321.f);
        sgemm_avx512(k.ta, k.tb, k.M, k.N, k.K, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), o.ldc,
                     {nullptr, act, out.data(), k.N, true});
        for (int64_t i = 0; i < k.M; ++i)
          for (int64_t j = 0; j < k.N; ++j) {
            const float v = plain[i * o.ldc + j];
            const double tol = 2e-6 * (1 + std::abs(v));
            ASSERT_NEAR(out[i * k.N + j], f(v), tol) << i << ", " << j;
            ASSERT_NEAR(c[i * o.ldc + j], grad(1.0f, v), tol) << i << ", " << j;
          }
      };
      check(UnaryFn::Gelu, fn::Gelu{}, fn::GeluGrad{});
      check(UnaryFn::GeluTanh, fn::GeluTanh{}, fn::GeluTanhGrad{});
      check(UnaryFn::Silu, fn::Silu{}, fn::SiluGrad{});
    }
  EXPECT_FALSE(sgemm_derivative_supported(UnaryFn::Relu));
}

TEST_F(OwnSgemm, SetSgemmFallsBackToTheBlasOnlyWhenAsked) {
  EXPECT_EQ(set_sgemm(Sgemm::Blas), Sgemm::Blas);
  EXPECT_EQ(sgemm_in_use(), Sgemm::Blas);
  EXPECT_EQ(set_sgemm(Sgemm::Avx512), Sgemm::Avx512);
  EXPECT_EQ(sgemm_in_use(), Sgemm::Avx512);
}

}  // namespace
}  // namespace fg
