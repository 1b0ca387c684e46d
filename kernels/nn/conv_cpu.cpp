// The convolution kernels of the CPU (kernels/nn/nn.h): im2col / col2im and the conv2d op's three
// kernels, image by image, the images spread over the pool's threads; at avx2 and avx512 with
// stride 1 the products on packed panels (kernels/linalg/packed_gemm.h), elsewhere the GEMM.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "flowgrad/base/parallel.h"
#include "kernels/common/vec.h"
#include "kernels/common/workspace.h"
#include "kernels/linalg/gemm.h"
#include "kernels/linalg/packed_gemm.h"
#include "kernels/nn/nn.h"

namespace fg {
namespace {

// The output columns ox whose input column ox * stride - pad + k lies inside [0, w): [lo, hi).
// Outside it a column reads padding; inside, the loops below run without a bounds test (for
// stride 1 a row is one contiguous copy or add).
struct InsideColumns {
  int64_t lo, hi;
  InsideColumns(int64_t out_w, int64_t w, int64_t stride, int64_t pad, int64_t k) {
    int64_t first = pad - k, last = w - 1 + pad - k;  // ox * stride must lie in [first, last]
    hi = last < 0 ? 0 : std::min(out_w, last / stride + 1);
    lo = std::min(hi, first <= 0 ? int64_t{0} : (first + stride - 1) / stride);
  }
};

template <class T>
void accumulate_row(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// One plane (H, W) of an image -> its kh*kw rows of columns (each out_h*out_w), zero padding.
template <class T>
void im2col_plane(const Conv2dGeometry& g, const T* img, T* out_rows) {
  const int64_t L = g.out_h * g.out_w;
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      T* out = out_rows + (ki * g.kw + kj) * L;
      const InsideColumns in(g.out_w, g.w, g.stride_w, g.pad_w, kj);
      for (int64_t oy = 0; oy < g.out_h; ++oy) {
        T* row = out + oy * g.out_w;
        int64_t iy = oy * g.stride_h - g.pad_h + ki;
        if (iy < 0 || iy >= g.h) {
          std::fill(row, row + g.out_w, T(0));
          continue;
        }
        std::fill(row, row + in.lo, T(0));
        const T* src = img + iy * g.w + in.lo * g.stride_w - g.pad_w + kj;
        if (g.stride_w == 1) std::copy(src, src + (in.hi - in.lo), row + in.lo);
        else
          for (int64_t ox = in.lo; ox < in.hi; ++ox) row[ox] = src[(ox - in.lo) * g.stride_w];
        std::fill(row + in.hi, row + g.out_w, T(0));
      }
    }
}

// The adjoint of im2col_plane: the plane's kh*kw rows of columns summed into img (overwritten).
template <class T>
void col2im_plane(const Conv2dGeometry& g, const T* in_rows, T* img) {
  const int64_t L = g.out_h * g.out_w;
  std::memset(img, 0, sizeof(T) * g.h * g.w);
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const T* in = in_rows + (ki * g.kw + kj) * L;
      const InsideColumns inside(g.out_w, g.w, g.stride_w, g.pad_w, kj);
      for (int64_t oy = 0; oy < g.out_h; ++oy) {
        int64_t iy = oy * g.stride_h - g.pad_h + ki;
        if (iy < 0 || iy >= g.h) continue;
        const T* src = in + oy * g.out_w + inside.lo;
        T* dst = img + iy * g.w + inside.lo * g.stride_w - g.pad_w + kj;
        if (g.stride_w == 1) accumulate_row(dst, src, inside.hi - inside.lo);
        else
          for (int64_t ox = inside.lo; ox < inside.hi; ++ox) dst[(ox - inside.lo) * g.stride_w] += src[ox - inside.lo];
      }
    }
}

// plane(p, L) for every (image, channel) plane p of the batch over the pool (L = out_h * out_w).
template <class Plane>
void over_planes(const Conv2dGeometry& g, Plane&& plane) {
  parallel_for(g.n * g.c, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) plane(p, g.out_h * g.out_w);
  });
}

// Whether the convolution reads each pixel once, in place (1x1 kernel, stride 1, no padding): an
// image (C, H, W) is then its own columns (C, H*W) and no im2col is needed.
bool pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// The columns (C*kh*kw, L) of image n: the image itself for a pointwise convolution, else
// im2col of it into `cols`.
template <class T>
const T* image_columns(const Conv2dGeometry& g, const T* x, int64_t n, T* cols) {
  const T* img = x + n * g.c * g.h * g.w;
  if (pointwise(g)) return img;
  for (int64_t plane = 0; plane < g.c; ++plane)
    im2col_plane(g, img + plane * g.h * g.w, cols + plane * g.kh * g.kw * g.out_h * g.out_w);
  return cols;
}

// The images in `chunks` runs: one run per pool thread where there are at least as many images
// as threads, each with its own columns and the BLAS single-threaded inside it; else one run
// whose products are threaded. A convolution's products per image are small (16-32 output
// channels by 1024 pixels in bench_cnn_rnn's CNN), and a threaded GEMM per image spent more on
// waking and joining threads than it saved: that CNN's step took 206 ms on 2 threads against
// 101 ms on 1 (avx512), 5 GEMMs per image and layer each waiting on the pool.
int image_chunks(const Conv2dGeometry& g) {
  const int threads = in_parallel_region() ? 1 : pool_threads();
  return g.n >= threads ? threads : 1;
}
template <class Run>  // run(chunk) for chunk in [0, chunks)
void over_chunks(int chunks, Run&& run) {
  if (chunks == 1) return run(0);
  SingleThreadedBlas single;
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) run(static_cast<int>(c));
  });
}

// body(cols, CK, L, n0, n1): images [n0, n1) with a typed workspace for one image's columns (CK =
// C*kh*kw rows of L = out_h*out_w; none for a pointwise convolution), run by over_chunks.
template <class Body>
void over_images(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, Body&& body) {
  visit_float_dtype(dtype, "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const int64_t CK = g.c * g.kh * g.kw, L = g.out_h * g.out_w, per = pointwise(g) ? 0 : CK * L;
    const int chunks = image_chunks(g);
    CpuWorkspace ws(env, sizeof(T) * per * chunks);
    T* cols = static_cast<T*>(ws.data());
    over_chunks(chunks, [&](int c) { body(cols + c * per, CK, L, g.n * c / chunks, g.n * (c + 1) / chunks); });
  });
}

// Whether a convolution's products run on packed panels (packed_gemm.h), reading the image's
// columns in place (InPlace), rather than im2col and the GEMM: at avx2 and avx512 with stride 1.
// With fewer images than threads an image's product spreads its panels or rows over the threads;
// every value is summed in the same order whatever the split, so the bits do not depend on the
// thread count. Stride 2 was slower packed (a 32 -> 64 channel 32x32 layer, 64 images, 2 threads,
// avx512: forward 4.3-4.9 -> 5.0-5.1 ms, weight gradient +1.5 ms), and slower again read in place
// from the padded image split into its four phases (forward 4.0-4.1 -> 6.7-7.3 ms, forward and
// backward 13.5-13.8 -> 19.3-19.9; avx2 5.0-5.1 -> 7.2-7.8 ms), so it keeps the GEMM.
bool packed_products(const Conv2dGeometry& g) {
  return isa_vector_bytes() >= 32 && g.stride_h == 1 && g.stride_w == 1;
}

// A stride-1 convolution's columns read in place from the padded image (C planes of hp x wp,
// zeros around the image, then `slack` zeros): the row of columns for (c, ki, kj) starts at
// offsets[(c * kh + ki) * kw + kj] = c * hp * wp + ki * wp + kj, and its value for output pixel
// (y, x) lies y * wp + x after that. The output is then computed as wide as the padded rows:
// wide() columns, of which out_w of every wp are kept (packed_gemm's Columns). Nothing is copied
// per column, where im2col wrote kh * kw copies of the image.
struct InPlace {
  int64_t hp, wp, size;
  InPlace(const Conv2dGeometry& g, int64_t slack)
      : hp(g.h + 2 * g.pad_h), wp(g.w + 2 * g.pad_w), size(g.c * hp * wp + slack) {}
  int64_t wide(const Conv2dGeometry& g) const { return (g.out_h - 1) * wp + g.out_w; }
  Columns columns(const Conv2dGeometry& g) const { return {g.out_w, wp}; }
  // The C*kh*kw row offsets, written into `out` (a workspace of the caller's).
  const int64_t* offsets(const Conv2dGeometry& g, int64_t* out) const {
    for (int64_t c = 0, k = 0; c < g.c; ++c)
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) out[k++] = c * hp * wp + ki * wp + kj;
    return out;
  }
};

// The image into its padded image, whose padding (and slack) the caller zeroed once.
template <class T>
void pad_image(const Conv2dGeometry& g, const InPlace& in, const T* img, T* padded) {
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t iy = 0; iy < g.h; ++iy)
      std::copy_n(img + (c * g.h + iy) * g.w, g.w, padded + (c * in.hp + iy + g.pad_h) * in.wp + g.pad_w);
}

// y[n] (M, out_h, out_w) = A (M, C*kh*kw) @ the columns of x[n] (C, h, w) (+ bias (M); null:
// none), image by image, the columns read in place from the padded image (stride 1): the forward
// (A = W) and the input gradient (dy padded, by the flipped kernel). The padded image's reads of
// a panel past the last wide column fall in its slack. A pointwise convolution's image is its own
// columns, packed as they are instead (aligned loads: the 1x1 64 -> 64 layer of bench_conv.py at
// avx2, 2 threads, took 1.27 ms read in place and 1.08 packed, 2026-12-07, a 2-core Xeon).
template <class T>
void convolve_in_place(const KernelEnv& env, const Conv2dGeometry& g, int64_t M, const T* A, const T* x,
                       const T* bias, T* y) {
  const InPlace in(g, panel_width<T>());
  const int64_t L = g.out_h * g.out_w, CK = g.c * g.kh * g.kw;
  const bool packed = pointwise(g);
  const int64_t per = packed ? packed_size<T>(CK, L) : in.size;
  const int chunks = image_chunks(g);
  CpuWorkspace ws(env, sizeof(T) * per * chunks), offset_space(env, packed ? 0 : sizeof(int64_t) * CK);
  const int64_t* offsets = packed ? nullptr : in.offsets(g, static_cast<int64_t*>(offset_space.data()));
  over_chunks(chunks, [&](int c) {
    T* block = static_cast<T*>(ws.data()) + c * per;
    if (!packed) std::fill(block, block + per, T(0));
    const PackedB<T> cols = packed ? packed_layout<T>(CK, L, 1, block) : in_place_b<T>(CK, in.wide(g), block, offsets);
    const RowsA<T> rows = prepare_a(cols, M, A, CK);
    for (int64_t n = g.n * c / chunks; n < g.n * (c + 1) / chunks; ++n) {
      const T* img = x + n * g.c * g.h * g.w;
      if (packed) pack_rows(cols, 0, CK, img, L);
      else pad_image(g, in, img, block);
      T* Y = y + n * M * L;
      if (bias)
        for (int64_t o = 0; o < M; ++o) std::fill(Y + o * L, Y + (o + 1) * L, bias[o]);
      parallel_for(cols.group_panels(), product_grain(M * CK * cols.width), [&](int64_t p0, int64_t p1) {
        packed_gemm(cols, rows, static_cast<const T*>(nullptr), bias ? Store::Accumulate : Store::Overwrite, Y, L,
                    p0, p1, packed ? Columns{} : in.columns(g));
      });
    }
  });
}

// dy's wide columns (InPlace: out_w of every wp kept, the others zero) as the rows of B (wide, O)
// in b's panels: dw^T += columns @ dy^T then sums over the wide columns, the dropped ones adding
// nothing.
template <class T>
void pack_wide_dy(const PackedB<T>& b, const Conv2dGeometry& g, const InPlace& in, const T* dy) {
  const int64_t P = b.width, L = g.out_h * g.out_w;
  for (int64_t p = 0; p < b.group_panels(); ++p) {
    const int64_t o0 = p * P, cols = std::min(P, b.N - o0);
    T* to = b.panels + p * b.K * P;
    for (int64_t j = 0; j < b.K; ++j, to += P) {
      const int64_t oy = j / in.wp, ox = j % in.wp;
      const int64_t kept = ox < g.out_w ? cols : 0;
      for (int64_t o = 0; o < kept; ++o) to[o] = dy[(o0 + o) * L + oy * g.out_w + ox];
      std::fill(to + kept, to + P, T(0));
    }
  }
}

// conv2d_cpu at generic: im2col into a workspace, then the GEMM.
void conv2d_gemm(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                 const void* w, const void* b, void* y) {
  over_images(env, dtype, g, [&](auto* cols, int64_t CK, int64_t L, int64_t n0, int64_t n1) {
    using T = std::remove_pointer_t<decltype(cols)>;
    const T* bias = static_cast<const T*>(b);
    for (int64_t n = n0; n < n1; ++n) {
      const T* B = image_columns(g, static_cast<const T*>(x), n, cols);
      T* Y = static_cast<T*>(y) + n * out_ch * L;
      if (!bias) {
        gemm_cpu(env, dtype, false, false, out_ch, L, CK, w, CK, B, L, Y, L);
        continue;
      }
      for (int64_t o = 0; o < out_ch; ++o) std::fill(Y + o * L, Y + (o + 1) * L, bias[o]);
      gemm_accumulate_cpu(env, dtype, false, false, out_ch, L, CK, w, CK, B, L, Y, L);
    }
  });
}

}  // namespace

void im2col_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* x, void* cols) {
  visit_float_dtype(dtype, "im2col", [&](auto tag) {
    using T = decltype(tag);
    over_planes(g, [&](int64_t p, int64_t L) {
      im2col_plane(g, static_cast<const T*>(x) + p * g.h * g.w, static_cast<T*>(cols) + p * g.kh * g.kw * L);
    });
  });
}

void col2im_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, const void* cols, void* x) {
  visit_float_dtype(dtype, "col2im", [&](auto tag) {
    using T = decltype(tag);
    over_planes(g, [&](int64_t p, int64_t L) {
      col2im_plane(g, static_cast<const T*>(cols) + p * g.kh * g.kw * L, static_cast<T*>(x) + p * g.h * g.w);
    });
  });
}

// oneDNN's where it wins (conv2d_takes_onednn). Else image by image: at avx2 and avx512 with
// stride 1 (packed_products) the image's columns read in place from the padded image
// (convolve_in_place), elsewhere one image's columns at a time in a
// workspace (C*kh*kw x L, cache-sized for small images) and the GEMM: y[n] (O, L) = W (O, CK) @
// cols[n] + b. bench_cnn_rnn's 32 -> 32 channel layer (64 images of 32x32, one thread, a loop of
// conv2d calls) against the columns copied into packed panels: 11.6-11.7 -> 10.0 ms at avx512
// (2026-12-07, a 2-core Xeon); its three layers in the CNN step (step.profile) 20.7 -> 18.9 ms at
// avx512, 28.5-29.1 -> 27.1-27.5 at avx2.
void conv2d_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch, const void* x,
                const void* w, const void* b, void* y) {
  if (conv2d_onednn_cpu(env, dtype, g, out_ch, x, w, b, y)) return;
  if (!packed_products(g)) return conv2d_gemm(env, dtype, g, out_ch, x, w, b, y);
  visit_float_dtype(dtype, "conv2d", [&](auto tag) {
    using T = decltype(tag);
    convolve_in_place(env, g, out_ch, static_cast<const T*>(w), static_cast<const T*>(x), static_cast<const T*>(b),
                      static_cast<T*>(y));
  });
}

// dx[n] = col2im(W^T (CK, O) @ dy[n] (O, L)); a pointwise convolution's product is dx[n] itself.
// At stride 1 on packed panels (packed_products) with padding below the kernel's size, dx is the
// convolution of dy padded by kh - 1 - pad_h, kw - 1 - pad_w with the kernel flipped and its
// channels swapped (convolve_in_place): no columns, no col2im. bench_cnn_rnn's CNN step (two
// layers, 64 images, one thread, step.profile): 18.5 -> 15.2-15.4 ms at avx512, 27.0-27.4 ->
// 23.1-23.2 at avx2 (2026-12-07, a 2-core Xeon).
void conv2d_input_grad_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch,
                           const void* dy, const void* w, void* dx) {
  if (packed_products(g) && g.pad_h < g.kh && g.pad_w < g.kw) {
    const Conv2dGeometry t{g.n, out_ch, g.out_h, g.out_w, g.kh, g.kw, 1, 1, g.kh - 1 - g.pad_h, g.kw - 1 - g.pad_w,
                           g.h, g.w};
    return visit_float_dtype(dtype, "conv2d", [&](auto tag) {
      using T = decltype(tag);
      const T* W = static_cast<const T*>(w);
      CpuWorkspace space(env, sizeof(T) * g.c * out_ch * g.kh * g.kw);
      T* flipped = static_cast<T*>(space.data());  // (C, O, kh, kw), each kernel turned half a turn
      for (int64_t c = 0, k = 0; c < g.c; ++c)
        for (int64_t o = 0; o < out_ch; ++o)
          for (int64_t ki = 0; ki < g.kh; ++ki)
            for (int64_t kj = 0; kj < g.kw; ++kj)
              flipped[k++] = W[((o * g.c + c) * g.kh + g.kh - 1 - ki) * g.kw + g.kw - 1 - kj];
      convolve_in_place(env, t, g.c, flipped, static_cast<const T*>(dy), static_cast<const T*>(nullptr),
                        static_cast<T*>(dx));
    });
  }
  over_images(env, dtype, g, [&](auto* cols, int64_t CK, int64_t L, int64_t n0, int64_t n1) {
    using T = std::remove_pointer_t<decltype(cols)>;
    const bool direct = pointwise(g);
    for (int64_t n = n0; n < n1; ++n) {
      T* img = static_cast<T*>(dx) + n * g.c * g.h * g.w;
      const T* G = static_cast<const T*>(dy) + n * out_ch * L;
      gemm_cpu(env, dtype, true, false, CK, L, out_ch, w, CK, G, L, direct ? img : cols, L);
      if (!direct)
        for (int64_t plane = 0; plane < g.c; ++plane)
          col2im_plane(g, cols + plane * g.kh * g.kw * L, img + plane * g.h * g.w);
    }
  });
}

// dw (O, CK) = sum over n of dy[n] (O, L) @ cols[n]^T, accumulated image by image; with several
// chunks each sums its images into its own partial, and the partials are added in chunk order
// (the same bits for a given thread count). At avx2 and avx512 with stride 1 the product is dw^T
// (CK, O) += cols[n] (CK, wide) @ dy[n]^T on packed panels (packed_gemm.h), the columns' rows read
// in place from the padded image (InPlace) and dy[n] packed with zeros at the dropped wide columns:
// neither im2col nor a GEMM's packing of the columns. bench_cnn_rnn's CNN step (three layers, 64
// images, one thread, step.profile): 19.7-20.4 -> 16.7-16.9 ms at avx512, 24.9-25.5 -> 23.2 at
// avx2 against the columns made by im2col (2026-12-07, a 2-core Xeon). The GEMM stays where
// packed_products says so (generic: A's values would first be spread over vectors, which costs
// more than it saves; strides other than 1), and for fewer output channels than a panel's columns
// (16 at avx512: half of each product's lanes idle).
void conv2d_weight_grad_cpu(const KernelEnv& env, DType dtype, const Conv2dGeometry& g, int64_t out_ch,
                            const void* x, const void* dy, void* dw) {
  visit_float_dtype(dtype, "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const int64_t CK = g.c * g.kh * g.kw, L = g.out_h * g.out_w, size = out_ch * CK;
    const int chunks = image_chunks(g);
    const bool packed = packed_products(g) && out_ch >= panel_width<T>(), partial = chunks > 1 || packed;
    const InPlace in(g, 0);
    // per chunk: the columns (a padded image or im2col's) and dy's panels
    const int64_t per = packed ? in.size : pointwise(g) ? 0 : CK * L;
    const int64_t panels = packed ? packed_size<T>(in.wide(g), out_ch) : 0;
    CpuWorkspace ws(env, sizeof(T) * (per + panels + (partial ? size : 0)) * chunks);
    CpuWorkspace offset_space(env, packed ? sizeof(int64_t) * CK : 0);
    const int64_t* offsets = packed ? in.offsets(g, static_cast<int64_t*>(offset_space.data())) : nullptr;
    T* cols = static_cast<T*>(ws.data());
    T* packs = cols + per * chunks;
    T* partials = packs + panels * chunks;
    T* out = static_cast<T*>(dw);
    over_chunks(chunks, [&](int c) {
      T* sum = partial ? partials + c * size : out;
      T* padded = cols + c * per;
      const int64_t n0 = g.n * c / chunks, n1 = g.n * (c + 1) / chunks;
      if (n0 == n1) std::fill(sum, sum + size, T(0));
      if (packed) std::fill(padded, padded + per, T(0));
      for (int64_t n = n0; n < n1; ++n) {
        const T* img = static_cast<const T*>(x) + n * g.c * g.h * g.w;
        const T* G = static_cast<const T*>(dy) + n * out_ch * L;
        if (!packed) {
          const T* B = image_columns(g, static_cast<const T*>(x), n, cols + c * per);
          (n == n0 ? gemm_cpu : gemm_accumulate_cpu)(env, dtype, false, true, out_ch, CK, L, G, L, B, L, sum, CK);
          continue;
        }
        pad_image(g, in, img, padded);
        const PackedB<T> b = packed_layout<T>(in.wide(g), out_ch, 1, packs + c * panels);
        pack_wide_dy(b, g, in, G);
        parallel_for(CK, product_grain(out_ch * b.K), [&](int64_t i0, int64_t i1) {  // rows of dw^T
          packed_gemm(b, prepare_a(b, i1 - i0, padded, offsets + i0), static_cast<const T*>(nullptr),
                      n == n0 ? Store::Overwrite : Store::Accumulate, sum + i0 * out_ch, out_ch, 0, b.group_panels());
        });
      }
    });
    if (!partial) return;
    for (int64_t o = 0; o < out_ch; ++o)
      for (int64_t k = 0; k < CK; ++k) {
        const int64_t at = packed ? k * out_ch + o : o * CK + k;  // packed partials are dw^T
        T total = partials[at];
        for (int c = 1; c < chunks; ++c) total += partials[c * size + at];
        out[o * CK + k] = total;
      }
  });
}

}  // namespace fg
