// CUDA im2col/col2im (CUDA builds only), with the CPU kernels' layouts (kernels/nn/nn.h):
// conv2d is im2col + a cuBLAS GEMM, its backward col2im; the pools reduce im2col's columns.
#pragma once
#include "kernels/nn/nn.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

// x (N, C, H, W) -> cols (N, C*kh*kw, out_h*out_w); zero padding. Overwrites cols.
void im2col_cuda(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* cols);
// The adjoint: every pixel of x (N, C, H, W) gathers the columns that read it, in the CPU's
// order (kernel row, then kernel column), so no atomics and the CPU's sums. Overwrites x.
void col2im_cuda(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* cols, void* x);

}  // namespace fg
