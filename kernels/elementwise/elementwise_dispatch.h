// The function switch of the elementwise kernels and the dtype conversion, written once for
// the CPU and CUDA files. `Map` supplies map1<Out, In>(s, f) and map2<Out, T>(s, f) for its
// device; the functors come from kernels/common/functors.h.
#pragma once
#include <limits>
#include <type_traits>

#include "flowgrad/base/errors.h"
#include "kernels/common/functors.h"
#include "flowgrad/base/half.h"
#include "kernels/elementwise/elementwise.h"

namespace fg::elementwise {

// Whether the function of table row `op` is defined for T: FloatOnly rows on floating types,
// Bitwise rows on bool and integers, Arithmetic rows on all but bool, the others on all.
template <OpId op, class T>
constexpr bool defined_for() {
  if (in_group(op, Group::FloatOnly)) return std::is_floating_point_v<T>;
  if (in_group(op, Group::Bitwise)) return std::is_integral_v<T>;  // bool included
  if (in_group(op, Group::Arithmetic)) return !std::is_same_v<T, bool>;
  return true;
}

template <class Map, class T, OpId op, class F>
void unary_apply(const Map& map, const Strided<2>& s, double lo, double hi) {
  if constexpr (!defined_for<op, T>()) {
    FG_ASSERT(false && "unary function not defined for this dtype");
  } else if constexpr (std::is_same_v<F, fn::Clamp>) {  // the only function with arguments
    map.template map1<T, T>(s, F{lo, hi});
  } else {
    map.template map1<T, T>(s, F{});
  }
}

template <class Map, class T, OpId op, class F>
void binary_apply(const Map& map, const Strided<3>& s) {
  if constexpr (!defined_for<op, T>()) {
    FG_ASSERT(false && "binary function not defined for this dtype");
  } else if constexpr (in_group(op, Group::Comparison)) {
    map.template map2<bool, T>(s, F{});
  } else {
    map.template map2<T, T>(s, F{});
  }
}

// One case per FG_UNARY/FG_BINARY row of the op table (flowgrad/base/ops.def).
template <class Map, class T>
void unary_typed(const Map& map, UnaryFn fn, const Strided<2>& s, double lo, double hi) {
  switch (fn) {
#define FG_UNARY(name, Functor, groups, autocast, api, saved, doc) \
  case UnaryFn::Functor: return unary_apply<Map, T, OpId::name, fn::Functor>(map, s, lo, hi);
#include "flowgrad/base/ops.def"
  }
}

template <class Map, class T>
void binary_typed(const Map& map, BinaryFn fn, const Strided<3>& s) {
  switch (fn) {
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc) \
  case BinaryFn::Functor: return binary_apply<Map, T, OpId::name, fn::Functor>(map, s);
#include "flowgrad/base/ops.def"
  }
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
void copy_typed(const Map& map, DType dst_dtype, DType src_dtype, const Strided<2>& s) {
  visit_dtype(dst_dtype, [&](auto dst_tag) {
    visit_dtype(src_dtype, [&](auto src_tag) {
      using To = decltype(dst_tag);
      using From = decltype(src_tag);
      map.template map1<To, From>(s, Convert<To, From>{});
    });
  });
}

}  // namespace fg::elementwise
