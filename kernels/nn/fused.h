// Fused kernels the plan's epilogue pass makes (plan/passes/fuse_epilogues.cpp).
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/op_table.h"  // BinaryFn

namespace fg {

// An activation's backward and the bias gradient in one pass (overwrites dx and db):
// dx = fn(g, x) elementwise, db = the column sums of dx. The rows are cut into at most eight
// slices, spread over the pool; a slice runs in blocks that fit in cache, each block's rows summed
// into the slice's partial sums while its dx is still there, and the partials are added in slice
// order (the result does not depend on the threads); a block's rows are added as the sum op adds
// them (add_rows_cpu: eight float rows in float, then in double), vectorised.
void act_backward_colsum_cpu(const KernelEnv& env, BinaryFn fn, DType dtype,  // float32 or float64
                             const void* g,             // (rows, n) contiguous
                             const void* x,             // (rows, n) contiguous: what the backward reads (the
                                                        // activation's input; its output for tanh, sigmoid)
                             void* dx,                  // (rows, n) contiguous
                             void* db,                  // (n)
                             int64_t rows, int64_t n);

}  // namespace fg
