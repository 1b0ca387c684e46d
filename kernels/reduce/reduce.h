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
// Sum or Mean of x (r1, kept, r2) over both ends: out (kept) of out_dtype, without moving the
// kept axis first (a convolution's bias gradient: (N, C, H, W) over (0, 2, 3)). Each (r1, kept)
// line of r2 is summed as reduce_cpu sums a line, and the lines in r1 order in double: the same
// bits on any number of threads. r1 * r2 > 0.
void sum_ends_cpu(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t r1,
                  int64_t kept, int64_t r2, void* out);
// acc (width) += the column sums of x (rows, width; rows `stride` elements apart), added as the sum
// op adds a column: float rows eight at a time in float, then into the double accumulators.
// Vectorised per instruction set (cpu_dispatch.h). For kernels that end in a column sum.
void add_rows_cpu(double* acc, const float* x, int64_t rows, int64_t stride, int64_t width);
void add_rows_cpu(double* acc, const double* x, int64_t rows, int64_t stride, int64_t width);
// Running sums along the middle axis: y[o, k, i] = x[o, 0, i] + ... + x[o, k, i], added in order
// in double (float x, y of x's dtype) or int64 (integer and bool x, y int64). x, y: (outer, r, inner).
void cumsum_cpu(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t r, int64_t inner, void* y);
// The same on CUDA device memory (CUDA builds only).
void cumsum_cuda(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t r, int64_t inner, void* y);
void reduce_cuda(const KernelEnv& env, ReduceFn fn, DType in_dtype, DType out_dtype, const void* x, int64_t outer,
                 int64_t r, int64_t inner, void* out, double correction);

}  // namespace fg
