// CUDA im2col and col2im: one thread per output element (grid-stride), see im2col.h.
#include "kernels/common/launch.cuh"
#include "kernels/conv/im2col.h"

namespace fg {
namespace {

template <class T>
__global__ void im2col_kernel(const T* x,  // (N, C, H, W)
                              Conv2dGeometry g,
                              T* cols) {   // (N, C*kh*kw, out_h*out_w)
  int64_t L = g.out_h * g.out_w, total = g.n * g.c * g.kh * g.kw * L;
  FG_GRID_LOOP(p, total) {
    int64_t l = p % L, row = p / L;  // row = (plane, ki, kj)
    int64_t kj = row % g.kw, ki = row / g.kw % g.kh, plane = row / (g.kw * g.kh);
    int64_t iy = l / g.out_w * g.stride_h - g.pad_h + ki, ix = l % g.out_w * g.stride_w - g.pad_w + kj;
    bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    cols[p] = inside ? x[(plane * g.h + iy) * g.w + ix] : T(0);
  }
}

template <class T>
__global__ void col2im_kernel(const T* cols,  // (N, C*kh*kw, out_h*out_w)
                              Conv2dGeometry g,
                              T* x) {         // (N, C, H, W); overwritten
  int64_t L = g.out_h * g.out_w, total = g.n * g.c * g.h * g.w;
  FG_GRID_LOOP(p, total) {
    int64_t ix = p % g.w, iy = p / g.w % g.h, plane = p / (g.w * g.h);
    T acc = 0;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      int64_t ty = iy + g.pad_h - ki;  // = oy * stride_h
      if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= g.out_h) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        int64_t tx = ix + g.pad_w - kj;
        if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= g.out_w) continue;
        acc += cols[((plane * g.kh + ki) * g.kw + kj) * L + ty / g.stride_h * g.out_w + tx / g.stride_w];
      }
    }
    x[p] = acc;
  }
}

}  // namespace

void im2col_cuda(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* cols) {
  int64_t total = g.n * g.c * g.kh * g.kw * g.out_h * g.out_w;
  if (total == 0) return;
  visit_float_dtype(dtype, "im2col", [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<grid_for(total), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(x), g, static_cast<T*>(cols));
  });
  check_launch("im2col");
}

void col2im_cuda(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* cols, void* x) {
  int64_t total = g.n * g.c * g.h * g.w;
  if (total == 0) return;
  visit_float_dtype(dtype, "col2im", [&](auto tag) {
    using T = decltype(tag);
    col2im_kernel<T><<<grid_for(total), kThreads, 0, kernel_stream(env)>>>(static_cast<const T*>(cols), g, static_cast<T*>(x));
  });
  check_launch("col2im");
}

}  // namespace fg
