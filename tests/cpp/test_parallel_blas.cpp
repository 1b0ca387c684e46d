// OpenBLAS's threaded GEMMs on flowgrad's pool (base/parallel.cpp, run_blas_jobs) in the cases
// Python cannot reach: a threaded GEMM issued from inside a parallel_for body (its jobs then get
// threads of their own; the pool is busy), and OpenBLAS asked for more threads than the pool has.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "flowgrad/base/parallel.h"
#include "flowgrad/core/runtime.h"
#include "kernels/linalg/gemm.h"
#include "kernels/linalg/sgemm.h"

namespace fg {
namespace {

constexpr int kN = 300;  // large enough for OpenBLAS to split it over its threads

struct Product {
  std::vector<float> a, b, expected;
  Product() : a(kN * kN), b(kN * kN), expected(kN * kN) {
    std::mt19937 rng(11);
    std::normal_distribution<float> dist;
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    gemm_blocked<float>(false, false, kN, kN, kN, a.data(), kN, b.data(), kN, expected.data(), kN);
  }
  void check_gemm() const {
    std::vector<float> c(kN * kN, -1.f);
    gemm_cpu(KernelEnv{}, DType::Float32, false, false, kN, kN, kN, a.data(), kN, b.data(), kN, c.data(), kN);
    for (int i = 0; i < kN * kN; ++i) ASSERT_NEAR(c[i], expected[i], 1e-3f * (1 + std::abs(expected[i])));
  }
};

class BlasOnPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (set_blas_threads(BlasThreads::Pool) != BlasThreads::Pool)
      GTEST_SKIP() << "the BLAS linked cannot run its jobs on our pool (not OpenBLAS >= 0.3.28)";
    previous_ = num_threads();
    set_num_threads(2);
    sgemm_ = sgemm_in_use();
    set_sgemm(Sgemm::Blas);  // float32 products on OpenBLAS, not flowgrad's own AVX-512 kernel
  }
  void TearDown() override {
    set_sgemm(sgemm_);
    if (previous_) set_num_threads(previous_);
  }
  int previous_ = 0;
  Sgemm sgemm_ = Sgemm::Blas;
};

TEST_F(BlasOnPool, GemmInsideAParallelRegionNeitherDeadlocksNorRaces) {
  const Product p;
  // Four bodies, each a threaded GEMM while the pool's region holds every worker.
  parallel_for(4, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p.check_gemm();
  });
}

TEST_F(BlasOnPool, MoreBlasThreadsThanPoolThreadsStillRunEveryJobAtOnce) {
  const Product p;
  set_pool_threads(1);  // OpenBLAS still splits over 2: its second job needs a thread the pool lacks
  p.check_gemm();
  set_num_threads(4);  // OpenBLAS's 4 jobs, the pool's 2 threads
  set_pool_threads(2);
  p.check_gemm();
}

}  // namespace
}  // namespace fg
