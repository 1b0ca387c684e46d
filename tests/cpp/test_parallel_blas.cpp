// Large GEMMs cut into single-threaded BLAS calls on flowgrad's pool (kernels/linalg/gemm_cpu.cpp,
// BlasThreads::Pool) in the cases Python cannot reach: products cut along rows and along columns,
// transposed and strided operands, accumulation into C, pools of 2 and 3 threads, and a GEMM issued
// from inside a parallel_for body (it then runs whole on that thread).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "flowgrad/core/runtime.h"
#include "kernels/linalg/gemm.h"

namespace fg {
namespace {

// C (M x N) = op(A) op(B) against a double-precision loop; A and B are stored with a padded
// leading dimension so the parts' operand offsets are exercised with lda != K and ldb != N.
struct Product {
  int64_t M, N, K;
  bool ta, tb;
  int64_t lda, ldb;
  std::vector<float> a, b;
  Product(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b)
      : M(m), N(n), K(k), ta(trans_a), tb(trans_b), lda((ta ? m : k) + 3), ldb((tb ? k : n) + 5),
        a((ta ? k : m) * lda), b((tb ? n : k) * ldb) {
    std::mt19937 rng(11);
    std::normal_distribution<float> dist;
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
  }
  double expected(int64_t i, int64_t j) const {
    double s = 0;
    for (int64_t k = 0; k < K; ++k)
      s += double(ta ? a[k * lda + i] : a[i * lda + k]) * double(tb ? b[j * ldb + k] : b[k * ldb + j]);
    return s;
  }
  void check(bool accumulate) const {
    const int64_t ldc = N + 2;
    std::vector<float> c(M * ldc, accumulate ? 0.5f : -7.f);
    auto gemm = accumulate ? &gemm_accumulate_cpu : &gemm_cpu;
    gemm(KernelEnv{}, DType::Float32, ta, tb, M, N, K, a.data(), lda, b.data(), ldb, c.data(), ldc);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const double want = expected(i, j) + (accumulate ? 0.5 : 0.0);
        ASSERT_NEAR(c[i * ldc + j], want, 1e-3 * (1 + std::abs(want))) << M << "x" << N << "x" << K << " at " << i << "," << j;
      }
      for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], accumulate ? 0.5f : -7.f) << "padding written";
    }
  }
};

class BlasOnPool : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = num_threads();
    if (set_blas_threads(BlasThreads::Pool) != BlasThreads::Pool)
      GTEST_SKIP() << "the BLAS linked threads its own calls (not OpenBLAS)";
  }
  void TearDown() override { set_num_threads(previous_); }
  int previous_ = 0;
};

TEST_F(BlasOnPool, PartsAlongRowsAndColumnsMatchTheProduct) {
  // Rows cut (M >= N), columns cut, sizes not multiples of 16, both transposes; 2 and 3 threads.
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    for (auto [m, n, k] : {std::tuple{515, 37, 130}, std::tuple{40, 333, 129}, std::tuple{96, 128, 1024}}) {
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool accumulate : {false, true}) Product(m, n, k, ta, tb).check(accumulate);
    }
  }
}

TEST_F(BlasOnPool, GemmInsideAParallelRegionRunsWholeOnItsThread) {
  set_num_threads(2);
  const Product p(300, 300, 300, false, false);
  parallel_for(4, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p.check(false);
  });
}

}  // namespace
}  // namespace fg
