// CUDA elementwise kernels: the same functors and function switch as the CPU file
// (elementwise_dispatch.h), over strided operands. Contiguous operands take a flat kernel;
// broadcast or strided ones compute each operand's offset from the linear index.
#include "kernels/common/launch.cuh"
#include "kernels/elementwise/elementwise_dispatch.h"

namespace fg {
namespace {

// Byte offsets of the element with linear index i (row-major over s.shape) in each operand.
template <int N>
__device__ __forceinline__ void offsets_of(const Strided<N>& s, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    int64_t idx = i % s.shape[d];
    i /= s.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx * s.strides[k][d];
  }
}

template <int N>
bool flat(const Strided<N>& s, const int (&sizes)[N]) {
  if (s.ndim > 1) return false;
  for (int k = 0; k < N; ++k)
    if (s.ndim == 1 && s.strides[k][0] != sizes[k]) return false;
  return true;
}

template <class Out, class In, class F>
__global__ void map1_flat(Out* y, const In* x, int64_t n, F f) {
  FG_GRID_LOOP(i, n)
    y[i] = f(x[i]);
}

template <class Out, class In, class F>
__global__ void map1_strided(Strided<2> s, int64_t n, F f) {
  FG_GRID_LOOP(i, n) {
    int64_t off[2];
    offsets_of(s, i, off);
    *reinterpret_cast<Out*>(s.data[0] + off[0]) = f(*reinterpret_cast<const In*>(s.data[1] + off[1]));
  }
}

template <class Out, class T, class F>
__global__ void map2_flat(Out* y, const T* a, const T* b, int64_t n, F f) {
  FG_GRID_LOOP(i, n)
    y[i] = f(a[i], b[i]);
}

template <class Out, class T, class F>
__global__ void map2_strided(Strided<3> s, int64_t n, F f) {
  FG_GRID_LOOP(i, n) {
    int64_t off[3];
    offsets_of(s, i, off);
    *reinterpret_cast<Out*>(s.data[0] + off[0]) =
        f(*reinterpret_cast<const T*>(s.data[1] + off[1]), *reinterpret_cast<const T*>(s.data[2] + off[2]));
  }
}

template <class T>
__global__ void where_strided(Strided<4> s, int64_t n) {
  FG_GRID_LOOP(i, n) {
    int64_t off[4];
    offsets_of(s, i, off);
    bool c = *reinterpret_cast<const bool*>(s.data[1] + off[1]);
    *reinterpret_cast<T*>(s.data[0] + off[0]) = *reinterpret_cast<const T*>(s.data[c ? 2 : 3] + off[c ? 2 : 3]);
  }
}

struct CudaMap {
  const KernelEnv& env;
  template <class Out, class In, class F>
  void map1(Strided<2> s, F f) const {
    s.coalesce();
    int64_t n = s.numel();
    if (n == 0) return;
    const int sizes[2] = {static_cast<int>(sizeof(Out)), static_cast<int>(sizeof(In))};
    if (flat(s, sizes))
      map1_flat<Out, In><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(reinterpret_cast<Out*>(s.data[0]),
                                                        reinterpret_cast<const In*>(s.data[1]), n, f);
    else
      map1_strided<Out, In><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(s, n, f);
    check_launch("elementwise");
  }
  template <class Out, class T, class F>
  void map2(Strided<3> s, F f) const {
    s.coalesce();
    int64_t n = s.numel();
    if (n == 0) return;
    const int sizes[3] = {static_cast<int>(sizeof(Out)), static_cast<int>(sizeof(T)), static_cast<int>(sizeof(T))};
    if (flat(s, sizes))
      map2_flat<Out, T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(reinterpret_cast<Out*>(s.data[0]),
                                                       reinterpret_cast<const T*>(s.data[1]),
                                                       reinterpret_cast<const T*>(s.data[2]), n, f);
    else
      map2_strided<Out, T><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(s, n, f);
    check_launch("elementwise");
  }
};

}  // namespace

void unary_cuda(const KernelEnv& env, UnaryFn fn, DType dtype, const Strided<2>& s, double lo, double hi) {
  visit_compute_dtype(dtype, "unary", [&](auto t) { elementwise::unary_typed<CudaMap, decltype(t)>(CudaMap{env}, fn, s, lo, hi); });
}

void binary_cuda(const KernelEnv& env, BinaryFn fn, DType dtype, const Strided<3>& s) {
  visit_compute_dtype(dtype, "binary", [&](auto t) { elementwise::binary_typed<CudaMap, decltype(t)>(CudaMap{env}, fn, s); });
}

void where_cuda(const KernelEnv& env, DType dtype, const Strided<4>& s) {
  Strided<4> c = s;
  c.coalesce();
  int64_t n = c.numel();
  if (n == 0) return;
  visit_dtype(dtype, [&](auto t) { where_strided<decltype(t)><<<grid_for(n), kThreads, 0, kernel_stream(env)>>>(c, n); });
  check_launch("where");
}

void copy_cuda(const KernelEnv& env, DType dst_dtype, DType src_dtype, const Strided<2>& s) {
  elementwise::copy_typed<CudaMap>(CudaMap{env}, dst_dtype, src_dtype, s);
}

}  // namespace fg
