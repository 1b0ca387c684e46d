// Reductions over the middle axis of a contiguous (outer, r, inner) block.
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

enum class ReduceFn : uint8_t { Sum, Mean, Max, Min, ArgMax, ArgMin, Var, LogSumExp };

// x: (outer, r, inner) of in_dtype; out: (outer, inner) of out_dtype (int64 for Arg*).
// Float sums accumulate in double; Var divides by max(0, r - correction); Max/Min/Arg* need r > 0.
void reduce_cpu(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t outer,
                int64_t r, int64_t inner, void* out, double correction);
// The same on CUDA device memory (CUDA builds only).
void reduce_cuda(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t outer,
                 int64_t r, int64_t inner, void* out, double correction);

}  // namespace fg
