#include "kernels/elementwise/elementwise.h"

#include <cmath>
#include <limits>

#include "kernels/common/functors.h"

namespace fg {
namespace {

template <class Out, class In, class F>
void map1(const Strided<2>& s, F f) {
  for_each_run(s, kParallelGrain, [&](char** p, const int64_t* st, int64_t n) {
    if (st[0] == sizeof(Out) && st[1] == sizeof(In)) {
      Out* __restrict y = reinterpret_cast<Out*>(p[0]);
      const In* __restrict x = reinterpret_cast<const In*>(p[1]);
      for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * st[0]) = f(*reinterpret_cast<const In*>(p[1] + i * st[1]));
    }
  });
}

template <class Out, class T, class F>
void map2(const Strided<3>& s, F f) {
  for_each_run(s, kParallelGrain, [&](char** p, const int64_t* st, int64_t n) {
    Out* __restrict y = reinterpret_cast<Out*>(p[0]);
    const T* __restrict a = reinterpret_cast<const T*>(p[1]);
    const T* __restrict b = reinterpret_cast<const T*>(p[2]);
    if (st[0] == sizeof(Out) && st[1] == sizeof(T) && st[2] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
    } else if (st[0] == sizeof(Out) && st[1] == sizeof(T) && st[2] == 0) {
      const T bv = *b;  // tensor op scalar: the common broadcast
      for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * st[0]) =
            f(*reinterpret_cast<const T*>(p[1] + i * st[1]),
              *reinterpret_cast<const T*>(p[2] + i * st[2]));
    }
  });
}

template <class T>
void unary_typed(UnaryFn fn, const Strided<2>& s, double lo, double hi) {
  switch (fn) {
    case UnaryFn::Neg: return map1<T, T>(s, fn::Neg{});
    case UnaryFn::Abs: return map1<T, T>(s, fn::Abs{});
    case UnaryFn::Square: return map1<T, T>(s, fn::Square{});
    case UnaryFn::Sign: return map1<T, T>(s, fn::Sign{});
    case UnaryFn::Relu: return map1<T, T>(s, fn::Relu{});
    case UnaryFn::Clamp: return map1<T, T>(s, fn::Clamp{lo, hi});
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (fn) {
      case UnaryFn::Exp: return map1<T, T>(s, fn::Exp{});
      case UnaryFn::Log: return map1<T, T>(s, fn::Log{});
      case UnaryFn::Sqrt: return map1<T, T>(s, fn::Sqrt{});
      case UnaryFn::Rsqrt: return map1<T, T>(s, fn::Rsqrt{});
      case UnaryFn::Sin: return map1<T, T>(s, fn::Sin{});
      case UnaryFn::Cos: return map1<T, T>(s, fn::Cos{});
      case UnaryFn::Tanh: return map1<T, T>(s, fn::Tanh{});
      case UnaryFn::Erf: return map1<T, T>(s, fn::Erf{});
      case UnaryFn::Sigmoid: return map1<T, T>(s, fn::Sigmoid{});
      case UnaryFn::Silu: return map1<T, T>(s, fn::Silu{});
      case UnaryFn::Softplus: return map1<T, T>(s, fn::Softplus{});
      case UnaryFn::Gelu: return map1<T, T>(s, fn::Gelu{});
      case UnaryFn::GeluTanh: return map1<T, T>(s, fn::GeluTanh{});
      default: break;
    }
  }
  FG_ASSERT(false && "unary function not defined for this dtype");
}

template <class T>
void binary_typed(BinaryFn fn, const Strided<3>& s) {
  switch (fn) {
    case BinaryFn::Eq: return map2<bool, T>(s, fn::Eq{});
    case BinaryFn::Ne: return map2<bool, T>(s, fn::Ne{});
    case BinaryFn::Lt: return map2<bool, T>(s, fn::Lt{});
    case BinaryFn::Le: return map2<bool, T>(s, fn::Le{});
    case BinaryFn::Gt: return map2<bool, T>(s, fn::Gt{});
    case BinaryFn::Ge: return map2<bool, T>(s, fn::Ge{});
    case BinaryFn::Maximum: return map2<T, T>(s, fn::Maximum{});
    case BinaryFn::Minimum: return map2<T, T>(s, fn::Minimum{});
    default: break;
  }
  if constexpr (!std::is_same_v<T, bool>) {
    switch (fn) {
      case BinaryFn::Add: return map2<T, T>(s, fn::Add{});
      case BinaryFn::Sub: return map2<T, T>(s, fn::Sub{});
      case BinaryFn::Mul: return map2<T, T>(s, fn::Mul{});
      case BinaryFn::Div: return map2<T, T>(s, fn::Div{});
      case BinaryFn::Pow: return map2<T, T>(s, fn::Pow{});
      default: break;
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (fn) {
      case BinaryFn::GeluGrad: return map2<T, T>(s, fn::GeluGrad{});
      case BinaryFn::GeluTanhGrad: return map2<T, T>(s, fn::GeluTanhGrad{});
      default: break;
    }
  }
  FG_ASSERT(false && "binary function not defined for this dtype");
}

}  // namespace

void unary_cpu(UnaryFn fn, DType dtype, const Strided<2>& s, double lo, double hi) {
  visit_compute_dtype(dtype, "unary", [&](auto t) { unary_typed<decltype(t)>(fn, s, lo, hi); });
}

void binary_cpu(BinaryFn fn, DType dtype, const Strided<3>& s) {
  visit_compute_dtype(dtype, "binary", [&](auto t) { binary_typed<decltype(t)>(fn, s); });
}

void where_cpu(DType dtype, const Strided<4>& s) {
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

template <class T>
constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

template <class To, class From>
To convert(From v) {
  if constexpr (is_half_v<From>) {
    return convert<To, float>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Out-of-range float-to-int is undefined in C++: saturate, and map NaN to 0.
    if (v != v) return To(0);
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v <= static_cast<From>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

void copy_cpu(DType dst_dtype, DType src_dtype, const Strided<2>& s) {
  visit_dtype(dst_dtype, [&](auto dst_tag) {
    visit_dtype(src_dtype, [&](auto src_tag) {
      using To = decltype(dst_tag);
      using From = decltype(src_tag);
      map1<To, From>(s, [](From v) { return convert<To, From>(v); });
    });
  });
}

void fill_cpu(DType dtype, void* data, int64_t n, double value) {
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v = convert<T, double>(value);
    T* p = static_cast<T*>(data);
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = v;
    });
  });
}

bool has_nonfinite_cpu(DType dtype, const void* data, int64_t n) {
  bool found = false;
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool> && !std::is_integral_v<T>) {
      const T* p = static_cast<const T*>(data);
      for (int64_t i = 0; i < n && !found; ++i) found = !std::isfinite(static_cast<double>(p[i]));
    }
  });
  return found;
}

}  // namespace fg
