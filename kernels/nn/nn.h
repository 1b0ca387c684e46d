// Fused nn kernels on contiguous float buffers.
#pragma once
#include <cstdint>
#include <string>

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

// The conv2d op's CPU kernels (float32, float64; contiguous buffers): image by image, one image's
// columns (C*kh*kw, out_h*out_w) at a time in a workspace, so the N images' columns are never in
// memory at once; a pointwise convolution (1x1, stride 1, no padding) multiplies the image itself.
// y (N, O, out_h, out_w) = W (O, C, kh, kw) * x (N, C, H, W) + b (O; null: none). Overwrites y.
void conv2d_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                const void* w, const void* b, void* y);
// oneDNN's forward convolution in place of conv2d_cpu's own (kernels/nn/conv_onednn_cpu.cpp), in
// builds with oneDNN (FLOWGRAD_ONEDNN): float32 at avx2 and avx512, two images or more, for the
// shapes the conv kernel in use takes it for (never depending on the thread count).
// conv2d_takes_onednn says whether it would; conv2d_onednn_cpu runs it and returns true, or returns
// false having done nothing. A oneDNN failure raises a RuntimeError naming the shape.
bool conv2d_takes_onednn(DType dtype, const Conv2dGeometry& g, int64_t out_ch);
bool conv2d_onednn_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                       const void* w, const void* b, void* y);
// Who runs float32 forward convolutions (FLOWGRAD_CONV): Auto, oneDNN for the shapes where it beat
// ours (conv2d_takes_onednn's rule: at avx2 kernels larger than 1x1, at avx512 strides above 1 and
// kernels larger than 3x3; measured per shape in docs/benchmarks.md); Own, never oneDNN; OneDnn,
// oneDNN wherever conv2d_onednn_cpu can run it. set_conv_kernel returns it.
enum class ConvKernel { Auto, Own, OneDnn };
ConvKernel set_conv_kernel(ConvKernel which);
ConvKernel conv_kernel_in_use();
ConvKernel conv_kernel_named(const std::string& name);  // "auto", "own", "onednn"; else a ValueError
std::string conv_kernel_name(ConvKernel which);
// oneDNN's version in this build ("2.6.3"), "" without it.
std::string onednn_version();
// dx (N, C, H, W) = col2im(W^T @ dy[n]) image by image. Overwrites dx.
void conv2d_input_grad_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch,
                           const void* dy, const void* w, void* dx);
// dw (O, C, kh, kw) = sum over images of dy[n] @ im2col(x[n])^T. Overwrites dw.
void conv2d_weight_grad_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch,
                            const void* x, const void* dy, void* dw);

// Training batch norm over x (N, C, hw) (float32/float64, contiguous): per channel the mean and
// the biased variance of its N*hw values (two passes over the channel's planes, in double), then
// y = (x - mean) / sqrt(var + eps) * w + b (w, b (C) or null), as (x - mean) * scale + b, with
// `relu` the relu op's max(y, 0) (a compiled plan's BatchNorm + ReLU). Writes y, mean (C) and var
// (C). Channels run in parallel.
void batch_norm_cpu(const KernelEnv& env, DType dtype, const void* x, const void* w, const void* b, int64_t n,
                    int64_t c, int64_t hw, double eps, bool relu, void* y, void* mean, void* var);
// Its gradient, first order, from g = dL/dy (with relu_out, the relu's output, g where it is > 0,
// else 0: relu_backward's gradient in the same passes): per channel
// db = sum g, dw = sum g xhat and dx = w rstd (g - db / count - xhat dw / count), xhat = (x - mean)
// rstd. dw, db may each be null (not wanted); dx too, but not with relu_out (it holds the masked g).
void batch_norm_backward_cpu(const KernelEnv& env, DType dtype, const void* g, const void* relu_out, const void* x,
                             const void* w, const void* mean, const void* var, int64_t n, int64_t c, int64_t hw,
                             double eps, void* dx, void* dw, void* db);

// Max pooling of every plane of x (N, C, H, W) over kh x kw windows a stride apart, no padding
// (float32/float64): y (N, C, out_h, out_w) and, per output, the flat index (within its plane,
// row * W + column) of the first maximum of its window (a NaN, where there is one). Overwrites both.
void max_pool2d_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* y,
                    int64_t* index);
// Its gradient: each output's gradient added at its index (overlapping windows sum). Overwrites dx.
void max_pool2d_backward_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* grad,
                             const int64_t* index, void* dx);

}  // namespace fg
