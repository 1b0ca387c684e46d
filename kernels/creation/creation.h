// Creation kernels: ranges, identity and counter-based random fills of contiguous buffers.
#pragma once
#include <cstdint>

#include "flowgrad/core/dtype.h"

namespace fg {

void arange_cpu(DType dtype, double start, double step, int64_t n, void* out);
void linspace_cpu(DType dtype, double start, double end, int64_t n, void* out);
void eye_cpu(DType dtype, int64_t rows, int64_t cols, void* out);

enum class RandomKind : uint8_t { Uniform, Normal, Integer };
// Element i takes Philox(counter = offset + i, key = seed). Uniform: [0, 1); Normal: N(0, 1);
// Integer: [low, high).
void random_cpu(RandomKind kind, DType dtype, uint64_t seed, uint64_t offset, int64_t n,
                int64_t low, int64_t high, void* out);

// CUDA counterparts (creation_cuda.cu); only present in CUDA builds.
void fill_cuda(DType dtype, void* data, int64_t n, double value);

}  // namespace fg
