// C++ tests of engine internals that Python cannot reach directly: the blocked GEMM fallback
// (used when no BLAS is linked), half-precision conversion, Philox, the CPU allocator and the
// shared-memory gate of the CUDA attention kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "flowgrad/core/allocator.h"
#include "kernels/attention/attention.h"
#include "flowgrad/base/half.h"
#include "kernels/common/philox.h"
#include "kernels/linalg/gemm.h"

namespace fg {
namespace {

// C = op(A) op(B) for row-major storage, computed naively in double.
std::vector<double> naive(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A,
                          const std::vector<float>& B) {
  std::vector<double> C(M * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k)
        C[i * N + j] += double(ta ? A[k * M + i] : A[i * K + k]) * double(tb ? B[j * K + k] : B[k * N + j]);
  return C;
}

TEST(GemmBlocked, MatchesNaiveOnOddShapesAndTransposes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {45, 65, 33}, {130, 7, 300}, {64, 64, 257}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        std::vector<float> A(M * K), B(K * N), C(M * N, -1.f);
        for (float& v : A) v = dist(rng);
        for (float& v : B) v = dist(rng);
        gemm_blocked<float>(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, C.data(), N);
        std::vector<double> ref = naive(ta, tb, M, N, K, A, B);
        for (int i = 0; i < M * N; ++i) ASSERT_NEAR(C[i], ref[i], 1e-3 * (1 + std::abs(ref[i])));
      }
  }
}

TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float v : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f})
    EXPECT_EQ(static_cast<float>(float16(v)), v);
  EXPECT_TRUE(std::isinf(static_cast<float>(float16(70000.f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(float16(NAN))));
  EXPECT_EQ(static_cast<float>(bfloat16(1.f)), 1.f);
  EXPECT_EQ(static_cast<float>(bfloat16(1.00390625f)), 1.f);  // tie rounds to even
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(NAN))));
}

TEST(Philox, DeterministicAndCounterSensitive) {
  Philox4 a = philox4x32_10(5, 42), b = philox4x32_10(5, 42), c = philox4x32_10(6, 42);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.v[i], b.v[i]);
  EXPECT_NE(a.v[0], c.v[0]);
  double mean = 0;
  for (int i = 0; i < 10000; ++i) mean += uniform_float(philox4x32_10(i, 1).v[0]);
  EXPECT_NEAR(mean / 10000, 0.5, 0.02);
}

TEST(CpuAllocator, ReusesFreedBlocksAndCountsBytes) {
  CpuAllocator& alloc = CpuAllocator::get();
  size_t granted = 0;
  void* p = alloc.allocate(1000, &granted);
  EXPECT_GE(granted, 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  int64_t live = alloc.stats().allocated;
  alloc.release(p, granted);
  EXPECT_EQ(alloc.stats().allocated, live - static_cast<int64_t>(granted));
  size_t again = 0;
  void* q = alloc.allocate(1000, &again);
  EXPECT_EQ(q, p);  // served from the cache
  alloc.release(q, again);
  for (size_t bytes : {size_t{1}, size_t{70}, size_t{1025}, size_t{3000}, size_t{1} << 20, (size_t{1} << 20) + 1}) {
    size_t first = 0, second = 0;
    void* a = alloc.allocate(bytes, &first);
    EXPECT_GE(first, bytes);
    EXPECT_LE(first, bytes + bytes / 4 + 64);  // at most 25% (or one 64-byte unit) of waste
    alloc.release(a, first);
    void* b = alloc.allocate(bytes, &second);  // every size class reuses its own freed block
    EXPECT_EQ(a, b) << bytes;
    alloc.release(b, second);
  }
}

// The byte counts the CUDA launches request (the 2026-11-23 review's figures, the backward's
// since grown by its row log-sums) and the fallback
// they decide: sm_86/sm_89 allow 101,376 bytes per block, an H100 232,448.
TEST(AttentionSharedMemory, BytesPerKernelAndTheFallbackForSmallLimits) {
  EXPECT_EQ(attention_cuda_shared_bytes(DType::BFloat16, 64, true).forward, 82176);
  EXPECT_EQ(attention_cuda_shared_bytes(DType::Float16, 96, true).forward, 110848);
  EXPECT_EQ(attention_cuda_shared_bytes(DType::BFloat16, 128, true).forward, 139520);
  EXPECT_EQ(attention_cuda_shared_bytes(DType::Float32, 128, true).forward, 115712);
  EXPECT_EQ(attention_cuda_shared_bytes(DType::BFloat16, 128, false).forward, 115712);  // no tensor cores
  EXPECT_EQ(attention_cuda_shared_bytes(DType::Float32, 128, true).backward, 116352);  // 116224 + row log-sums
  constexpr int64_t sm86 = 101376, h100 = 232448;
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16})
    for (int64_t head_dim : {1, 32, 33, 64, 65, 96, 97, 128}) EXPECT_EQ(attention_cuda_shared_problem(dt, head_dim, true, h100), nullptr);
  EXPECT_EQ(attention_cuda_shared_problem(DType::BFloat16, 64, true, sm86), nullptr);
  EXPECT_EQ(attention_cuda_shared_problem(DType::Float32, 96, true, sm86), nullptr);
  EXPECT_NE(attention_cuda_shared_problem(DType::BFloat16, 96, true, sm86), nullptr);  // the wmma forward
  EXPECT_NE(attention_cuda_shared_problem(DType::Float32, 128, true, sm86), nullptr);
  EXPECT_NE(attention_cuda_shared_problem(DType::Float32, 128, true, 116351), nullptr);  // only the backward
  EXPECT_EQ(attention_cuda_shared_problem(DType::Float32, 128, true, 116352), nullptr);
  EXPECT_EQ(attention_cuda_shared_problem(DType::Float32, 32, true, 48 * 1024), nullptr);
  EXPECT_NE(attention_cuda_shared_problem(DType::Float32, 33, true, 48 * 1024), nullptr);
}

}  // namespace
}  // namespace fg
