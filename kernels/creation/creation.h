// Creation kernels: ranges, identity and counter-based random fills of contiguous buffers.
#pragma once
#include <cstdint>
#include <type_traits>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/half.h"
#include "kernels/common/exact_math.h"
#include "kernels/common/philox.h"

namespace fg {

void arange_cpu(const KernelEnv& env, DType dtype, double start, double step, int64_t n, void* out);
void linspace_cpu(const KernelEnv& env, DType dtype, double start, double end, int64_t n, void* out);
void eye_cpu(const KernelEnv& env, DType dtype, int64_t rows, int64_t cols, void* out);

// Element i of arange / linspace, the same on every device: the product is rounded before the
// sum (exact_mul), as NumPy's is, so no compiler contracts it into an FMA (nvcc did: review G7).
FG_HD double arange_element(double start, double step, int64_t i) {
  return start + exact_mul(static_cast<double>(i), step);
}
FG_HD double linspace_element(double start, double end, int64_t n, int64_t i) {
  double step = n > 1 ? (end - start) / static_cast<double>(n - 1) : 0.0;
  // the second half counts back from `end`, like NumPy
  return i < (n + 1) / 2 ? start + exact_mul(step, static_cast<double>(i))
                         : end - exact_mul(step, static_cast<double>(n - 1 - i));
}

enum class RandomKind : uint8_t { Uniform, Normal, Integer };
// Where a random fill's counters start: element i takes Philox(counter = offset + i, key = seed).
// With `pair` (a random op's {seed, base} input in the device's memory, read when the kernel runs:
// a compiled plan's pair or one derived from it) the key is pair[0] and the counter pair[1] + offset + i.
struct PhiloxStart {
  uint64_t seed = 0, offset = 0;
  const uint64_t* pair = nullptr;
};
// Uniform: [0, 1); Normal: N(0, 1); Integer: [low, high).
void random_cpu(const KernelEnv& env, RandomKind kind, DType dtype, PhiloxStart start, int64_t n, int64_t low,
                int64_t high, void* out);
// philox_advance_: pair[1] += by on a {seed, base} pair in the device's memory, so a plan's next
// run (a CUDA graph replay included) draws the next counters without host work.
void advance_philox_cpu(const KernelEnv& env, uint64_t* pair, uint64_t by);

// A derived stream's seed (a parallel graph level's branch, a switch branch, a loop iteration): the
// SplitMix64 finaliser of the parent stream's seed and offset and the key, so sibling streams are
// independent and none shares counters with its parent.
FG_HD uint64_t philox_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
FG_HD uint64_t derived_seed(uint64_t seed, uint64_t offset, uint64_t key) {
  return philox_mix(seed ^ philox_mix(offset) ^ philox_mix(key));
}
// philox_derive: out = {derived_seed(pair[0], pair[1] + offset, key + index[0]), 0}, the pair of the
// stream derived from the one `pair` + offset stands at (index: a loop's iteration, or null for 0).
void derive_philox_cpu(const KernelEnv& env, const uint64_t* pair, uint64_t offset, uint64_t key, const int64_t* index,
                       uint64_t* out);  // pair, out: (2); index: () or null

// Element i of a random tensor of T, the same on every device (CPU and CUDA share it).
template <class T>
FG_HD T random_element(RandomKind kind, uint64_t seed, uint64_t offset, int64_t i, int64_t low, int64_t high) {
  Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(i), seed);
  if (kind == RandomKind::Integer) {
    uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    return static_cast<T>(low + static_cast<int64_t>(bits % static_cast<uint64_t>(high - low)));
  }
  constexpr bool kFloat64 = sizeof(T) == 8 && !std::is_integral_v<T>;
  double v = kind == RandomKind::Normal ? normal_from(r)
             : sizeof(T) == 8       ? uniform_double(r.v[0], r.v[1])
                                    : uniform_float(r.v[0]);
  if constexpr (kFloat64) return static_cast<T>(v);
  else return T(static_cast<float>(v));
}

// CUDA counterparts (creation_cuda.cu); only present in CUDA builds.
void fill_cuda(const KernelEnv& env, DType dtype, void* data, int64_t n, double value);
void arange_cuda(const KernelEnv& env, DType dtype, double start, double step, int64_t n, void* out);
void linspace_cuda(const KernelEnv& env, DType dtype, double start, double end, int64_t n, void* out);
void eye_cuda(const KernelEnv& env, DType dtype, int64_t rows, int64_t cols, void* out);
void random_cuda(const KernelEnv& env, RandomKind kind, DType dtype, PhiloxStart start, int64_t n, int64_t low,
                 int64_t high, void* out);
void advance_philox_cuda(const KernelEnv& env, uint64_t* pair, uint64_t by);
void derive_philox_cuda(const KernelEnv& env, const uint64_t* pair, uint64_t offset, uint64_t key, const int64_t* index,
                        uint64_t* out);

}  // namespace fg
