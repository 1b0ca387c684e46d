// Elementwise kernels: unary, binary, where, cast-copy and fill over strided operands.
// Operand 0 is always the output. Inputs arrive already in the compute dtype.
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/op_table.h"  // UnaryFn, BinaryFn and their groups
#include "kernels/common/strided.h"

namespace fg {

// y = fn(x): (out, x), both of `dtype`. clamp_lo/hi are used by Clamp (NaN = unbounded).
void unary_cpu(const KernelEnv& env, UnaryFn fn, DType dtype, const Strided<2>& s, double clamp_lo, double clamp_hi);
// (out, a, b): a and b of `dtype`; out of `dtype`, or bool for comparisons.
void binary_cpu(const KernelEnv& env, BinaryFn fn, DType dtype, const Strided<3>& s);
// (out, cond, a, b): cond bool; a, b, out of `dtype`.
void where_cpu(const KernelEnv& env, DType dtype, const Strided<4>& s);
// (dst, src) with conversion from src_dtype to dst_dtype.
void copy_cpu(const KernelEnv& env, DType dst_dtype, DType src_dtype, const Strided<2>& s);
// out = act(y) and y = act'(y) (Grad(1, y)) in one pass over n contiguous elements of float32 or
// float64, for act Gelu, GeluTanh or Silu: a linear_<act> keeping its derivative where its GEMM
// applies no epilogue (below AVX-512) evaluates what the two share once (Gelu: Phi and the
// density from one exp), bit for bit what unary_cpu and binary_cpu make one after the other.
void activation_and_derivative_cpu(const KernelEnv& env, UnaryFn act, DType dtype, void* y, void* out, int64_t n);
// Fills n contiguous elements with value (converted to dtype).
void fill_cpu(const KernelEnv& env, DType dtype, void* data, int64_t n, double value);
// The same on CUDA device memory (CUDA builds only), on the current stream.
void unary_cuda(const KernelEnv& env, UnaryFn fn, DType dtype, const Strided<2>& s, double clamp_lo, double clamp_hi);
void binary_cuda(const KernelEnv& env, BinaryFn fn, DType dtype, const Strided<3>& s);
void where_cuda(const KernelEnv& env, DType dtype, const Strided<4>& s);
void copy_cuda(const KernelEnv& env, DType dst_dtype, DType src_dtype, const Strided<2>& s);

}  // namespace fg
