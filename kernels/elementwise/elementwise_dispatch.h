// The function switch of the elementwise kernels and the dtype conversion, written once for
// the CPU and CUDA files. `Map` supplies map1<Out, In>(s, f) and map2<Out, T>(s, f) for its
// device; the functors come from kernels/common/functors.h.
#pragma once
#include <limits>
#include <type_traits>

#include "flowgrad/core/errors.h"
#include "kernels/common/functors.h"
#include "kernels/common/half.h"
#include "kernels/elementwise/elementwise.h"

namespace fg::elementwise {

template <class Map, class T>
void unary_typed(UnaryFn fn, const Strided<2>& s, double lo, double hi) {
  switch (fn) {
    case UnaryFn::Neg: return Map::template map1<T, T>(s, fn::Neg{});
    case UnaryFn::Abs: return Map::template map1<T, T>(s, fn::Abs{});
    case UnaryFn::Square: return Map::template map1<T, T>(s, fn::Square{});
    case UnaryFn::Sign: return Map::template map1<T, T>(s, fn::Sign{});
    case UnaryFn::Relu: return Map::template map1<T, T>(s, fn::Relu{});
    case UnaryFn::Clamp: return Map::template map1<T, T>(s, fn::Clamp{lo, hi});
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {  // bool included
    if (fn == UnaryFn::BitwiseNot) return Map::template map1<T, T>(s, fn::BitwiseNot{});
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (fn) {
      case UnaryFn::Exp: return Map::template map1<T, T>(s, fn::Exp{});
      case UnaryFn::Log: return Map::template map1<T, T>(s, fn::Log{});
      case UnaryFn::Sqrt: return Map::template map1<T, T>(s, fn::Sqrt{});
      case UnaryFn::Rsqrt: return Map::template map1<T, T>(s, fn::Rsqrt{});
      case UnaryFn::Sin: return Map::template map1<T, T>(s, fn::Sin{});
      case UnaryFn::Cos: return Map::template map1<T, T>(s, fn::Cos{});
      case UnaryFn::Tanh: return Map::template map1<T, T>(s, fn::Tanh{});
      case UnaryFn::Erf: return Map::template map1<T, T>(s, fn::Erf{});
      case UnaryFn::Sigmoid: return Map::template map1<T, T>(s, fn::Sigmoid{});
      case UnaryFn::Silu: return Map::template map1<T, T>(s, fn::Silu{});
      case UnaryFn::Softplus: return Map::template map1<T, T>(s, fn::Softplus{});
      case UnaryFn::Gelu: return Map::template map1<T, T>(s, fn::Gelu{});
      case UnaryFn::GeluTanh: return Map::template map1<T, T>(s, fn::GeluTanh{});
      default: break;
    }
  }
  FG_ASSERT(false && "unary function not defined for this dtype");
}

template <class Map, class T>
void binary_typed(BinaryFn fn, const Strided<3>& s) {
  switch (fn) {
    case BinaryFn::Eq: return Map::template map2<bool, T>(s, fn::Eq{});
    case BinaryFn::Ne: return Map::template map2<bool, T>(s, fn::Ne{});
    case BinaryFn::Lt: return Map::template map2<bool, T>(s, fn::Lt{});
    case BinaryFn::Le: return Map::template map2<bool, T>(s, fn::Le{});
    case BinaryFn::Gt: return Map::template map2<bool, T>(s, fn::Gt{});
    case BinaryFn::Ge: return Map::template map2<bool, T>(s, fn::Ge{});
    case BinaryFn::Maximum: return Map::template map2<T, T>(s, fn::Maximum{});
    case BinaryFn::Minimum: return Map::template map2<T, T>(s, fn::Minimum{});
    default: break;
  }
  if constexpr (!std::is_same_v<T, bool>) {
    switch (fn) {
      case BinaryFn::Add: return Map::template map2<T, T>(s, fn::Add{});
      case BinaryFn::Sub: return Map::template map2<T, T>(s, fn::Sub{});
      case BinaryFn::Mul: return Map::template map2<T, T>(s, fn::Mul{});
      case BinaryFn::Div: return Map::template map2<T, T>(s, fn::Div{});
      case BinaryFn::Pow: return Map::template map2<T, T>(s, fn::Pow{});
      default: break;
    }
  }
  if constexpr (std::is_integral_v<T>) {  // bool included
    switch (fn) {
      case BinaryFn::BitwiseAnd: return Map::template map2<T, T>(s, fn::BitwiseAnd{});
      case BinaryFn::BitwiseOr: return Map::template map2<T, T>(s, fn::BitwiseOr{});
      case BinaryFn::BitwiseXor: return Map::template map2<T, T>(s, fn::BitwiseXor{});
      default: break;
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (fn) {
      case BinaryFn::GeluGrad: return Map::template map2<T, T>(s, fn::GeluGrad{});
      case BinaryFn::GeluTanhGrad: return Map::template map2<T, T>(s, fn::GeluTanhGrad{});
      default: break;
    }
  }
  FG_ASSERT(false && "binary function not defined for this dtype");
}


template <class T>
constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

template <class To, class From>
FG_HD To convert(From v) {
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

template <class To, class From>
struct Convert {
  FG_HD To operator()(From v) const { return convert<To, From>(v); }
};

template <class Map>
void copy_typed(DType dst_dtype, DType src_dtype, const Strided<2>& s) {
  visit_dtype(dst_dtype, [&](auto dst_tag) {
    visit_dtype(src_dtype, [&](auto src_tag) {
      using To = decltype(dst_tag);
      using From = decltype(src_tag);
      Map::template map1<To, From>(s, Convert<To, From>{});
    });
  });
}

}  // namespace fg::elementwise
