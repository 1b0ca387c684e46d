#include "kernels/elementwise/elementwise.h"

#include <cmath>
#include <limits>

#include "kernels/common/cpu_dispatch.h"
#include "kernels/elementwise/elementwise_dispatch.h"

namespace fg {
namespace {

// The loops, compiled per instruction set and run at cpu_isa() (cpu_dispatch.h), the strided ones
// too: a functor rounds alike wherever it runs at one level (FMA contraction is per level).
template <class Out, class In, class F>
FG_CPU_KERNEL void map1_contiguous(Out* __restrict y, const In* __restrict x, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <class Out, class T, class F>
FG_CPU_KERNEL void map2_contiguous(Out* __restrict y, const T* __restrict a, const T* __restrict b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}
template <class Out, class T, class F>
FG_CPU_KERNEL void map2_scalar(Out* __restrict y, const T* __restrict a, T b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b);
}
template <class Out, class T, class F>
FG_CPU_KERNEL void map2_scalar_first(Out* __restrict y, T a, const T* __restrict b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a, b[i]);
}

template <class T, class F, class Grad>
FG_CPU_KERNEL void activate_with_derivative(T* __restrict y, T* __restrict out, int64_t n, F f, Grad grad) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = y[i];
    out[i] = f(v);
    y[i] = grad(T(1), v);
  }
}

template <class Out, class In, class F>
FG_CPU_KERNEL void map1_run(char** p, const int64_t* st, int64_t n, F f) {
  if (st[0] == sizeof(Out) && st[1] == sizeof(In)) {
    map1_contiguous(reinterpret_cast<Out*>(p[0]), reinterpret_cast<const In*>(p[1]), n, f);
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<Out*>(p[0] + i * st[0]) = f(*reinterpret_cast<const In*>(p[1] + i * st[1]));
  }
}

template <class Out, class T, class F>
FG_CPU_KERNEL void map2_run(char** p, const int64_t* st, int64_t n, F f) {
  Out* y = reinterpret_cast<Out*>(p[0]);
  const T* a = reinterpret_cast<const T*>(p[1]);
  const T* b = reinterpret_cast<const T*>(p[2]);
  if (st[0] == sizeof(Out) && st[1] == sizeof(T) && st[2] == sizeof(T)) {
    map2_contiguous(y, a, b, n, f);
  } else if (st[0] == sizeof(Out) && st[1] == sizeof(T) && st[2] == 0) {
    map2_scalar(y, a, *b, n, f);  // tensor op scalar: the common broadcast
  } else if (st[0] == sizeof(Out) && st[1] == 0 && st[2] == sizeof(T)) {
    map2_scalar_first(y, *a, b, n, f);  // scalar op tensor: 1 - x, and a kept derivative Grad(1, y)
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<Out*>(p[0] + i * st[0]) =
          f(*reinterpret_cast<const T*>(p[1] + i * st[1]), *reinterpret_cast<const T*>(p[2] + i * st[2]));
  }
}

// Elements per thread worth waking it for: fewer for functors that are costly per element.
template <class F>
constexpr int64_t grain_of() {
  if constexpr (requires { F::kCost; }) return kParallelGrain / F::kCost;
  else return kParallelGrain;
}

template <class Out, class In, class F>
void map1(const Strided<2>& s, F f) {
  for_each_run(s, grain_of<F>(), [&](char** p, const int64_t* st, int64_t n) { FG_AT_ISA(map1_run<Out, In>(p, st, n, f)); });
}

template <class Out, class T, class F>
void map2(const Strided<3>& s, F f) {
  for_each_run(s, grain_of<F>(), [&](char** p, const int64_t* st, int64_t n) { FG_AT_ISA(map2_run<Out, T>(p, st, n, f)); });
}

struct CpuMap {
  template <class Out, class In, class F>
  static void map1(const Strided<2>& s, F f) { fg::map1<Out, In>(s, f); }
  template <class Out, class T, class F>
  static void map2(const Strided<3>& s, F f) { fg::map2<Out, T>(s, f); }
};

}  // namespace

void unary_cpu(const KernelEnv& env, UnaryFn fn, DType dtype, const Strided<2>& s, double lo, double hi) {
  visit_compute_dtype(dtype, "unary", [&](auto t) { elementwise::unary_typed<CpuMap, decltype(t)>(CpuMap{}, fn, s, lo, hi); });
}

void binary_cpu(const KernelEnv& env, BinaryFn fn, DType dtype, const Strided<3>& s) {
  visit_compute_dtype(dtype, "binary", [&](auto t) { elementwise::binary_typed<CpuMap, decltype(t)>(CpuMap{}, fn, s); });
}

void activation_and_derivative_cpu(const KernelEnv& env, UnaryFn act, DType dtype, void* y, void* out, int64_t n) {
  visit_float_dtype(dtype, "activation_and_derivative", [&](auto zero) {
    using T = decltype(zero);
    auto run = [&](auto f, auto grad) {
      parallel_for(n, grain_of<decltype(grad)>(), [&](int64_t b, int64_t e) {
        FG_AT_ISA(activate_with_derivative<T>(static_cast<T*>(y) + b, static_cast<T*>(out) + b, e - b, f, grad));
      });
    };
    switch (act) {
      case UnaryFn::Gelu: return run(fn::Gelu{}, fn::GeluGrad{});
      case UnaryFn::GeluTanh: return run(fn::GeluTanh{}, fn::GeluTanhGrad{});
      case UnaryFn::Silu: return run(fn::Silu{}, fn::SiluGrad{});
      default: FG_ASSERT(false && "activation_and_derivative_cpu: an activation that keeps no derivative");
    }
  });
}

void where_cpu(const KernelEnv& env, DType dtype, const Strided<4>& s) {
  visit_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    for_each_run(s, kParallelGrain, [&](char** p, const int64_t* st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(p[1] + i * st[1]);
        *reinterpret_cast<T*>(p[0] + i * st[0]) =
            *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * st[c ? 2 : 3]);
      }
    });
  });
}

void copy_cpu(const KernelEnv& env, DType dst_dtype, DType src_dtype, const Strided<2>& s) {
  elementwise::copy_typed<CpuMap>(CpuMap{}, dst_dtype, src_dtype, s);
}

void fill_cpu(const KernelEnv& env, DType dtype, void* data, int64_t n, double value) {
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v = elementwise::convert<T, double>(value);
    T* p = static_cast<T*>(data);
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = v;
    });
  });
}

}  // namespace fg
