// Fused nn kernels on contiguous float buffers.
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

// softmax / log_softmax over the middle axis of (outer, r, inner); max-subtracted. The input is
// first multiplied by `scale`; with causal_rows = L > 0 (attention scores, inner == 1) line l is
// query row l % L and its entries j > l % L are masked out (-inf).
void softmax_cpu(const KernelEnv& env, DType dtype, bool log, const void* x, int64_t outer, int64_t r, int64_t inner,
                 void* y, double scale, int64_t causal_rows);
void softmax_cuda(const KernelEnv& env, DType dtype, bool log, const void* x, int64_t outer, int64_t r, int64_t inner,
                  void* y, double scale, int64_t causal_rows);  // CUDA builds only

// Normalises each row of x (rows, cols): y = (x - mean) * rstd [* w] [+ b]; writes mean and
// rstd (rows) for the backward rule. w, b (cols) may be null.
void layer_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* w, const void* b, int64_t rows,
                    int64_t cols, double eps, void* y, void* mean, void* rstd);
// layer_norm_cpu of s = x + r, in one pass over each row: s is written and normalised while the
// row is in cache. The bits of an add followed by layer_norm_cpu.
void add_layer_norm_cpu(const KernelEnv& env, DType dtype,
                        const void* x, const void* r,  // (rows, cols) each
                        const void* w, const void* b,  // (cols) each, or null
                        int64_t rows, int64_t cols, double eps,
                        void* s, void* y,              // (rows, cols) each, overwritten
                        void* mean, void* rstd);       // (rows) each, overwritten
// y = x * rstd [* w], rstd = 1 / sqrt(mean(x^2) + eps) per row.
void rms_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* w, int64_t rows, int64_t cols,
                  double eps, void* y, void* rstd);

// Backward of layer_norm (rms = false) or rms_norm over rows of (rows, cols), first order:
// xhat = (x - mean) * rstd (rms: x * rstd), gw = g * w (w may be null), and
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) (rms: without the mean(gw) term).
// Overwrites dx (rows, cols) and the weight and bias gradients dw = sum over rows of g * xhat,
// db = sum over rows of g (cols; zeros for rows == 0). mean may be null for rms. With `acc`
// (rows, cols; a residual's gradient) dx = that + acc, the bits of a separate add; null: dx is
// overwritten with it.
void norm_backward_cpu(const KernelEnv& env, DType dtype, bool rms, const void* g, const void* x, const void* w,
                       const void* mean, const void* rstd, const void* acc, int64_t rows, int64_t cols, void* dx,
                       void* dw, void* db);

// CUDA counterparts (CUDA builds only).
void layer_norm_cuda(const KernelEnv& env, DType dtype, const void* x, const void* w, const void* b, int64_t rows,
                     int64_t cols, double eps, void* y, void* mean, void* rstd);
void add_layer_norm_cuda(const KernelEnv& env, DType dtype, const void* x, const void* r, const void* w, const void* b,
                         int64_t rows, int64_t cols, double eps, void* s, void* y, void* mean, void* rstd);
void rms_norm_cuda(const KernelEnv& env, DType dtype, const void* x, const void* w, int64_t rows, int64_t cols,
                   double eps, void* y, void* rstd);
void norm_backward_cuda(const KernelEnv& env, DType dtype, bool rms, const void* g, const void* x, const void* w,
                        const void* mean, const void* rstd, const void* acc, int64_t rows, int64_t cols, void* dx,
                        void* dw, void* db);

struct Conv2dGeometry {
  int64_t n, c, h, w;            // input (N, C, H, W)
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w;
  int64_t out_h, out_w;
};
// x (N, C, H, W) -> cols (N, C*kh*kw, out_h*out_w); zero padding.
void im2col_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* cols);
// The adjoint: cols (N, C*kh*kw, out_h*out_w) summed into x (N, C, H, W) (overwritten).
void col2im_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* cols, void* x);

}  // namespace fg
