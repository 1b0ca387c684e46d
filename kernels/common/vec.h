// One vector register's worth of T for the instruction-set level in force (cpu_dispatch.h), as a
// GCC/clang vector extension, and the switch that runs a kernel compiled for that width: the CPU
// attention tile (kernels/attention/) and the GEMV (kernels/linalg/gemv_cpu.cpp) use them.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/cpu_dispatch.h"

namespace fg {

// One vector of T, W bytes (GCC/clang vector extension). Explicit vectors keep the accumulators
// in registers: the auto-vectoriser vectorised the one-vector-wide variant along the inner dim
// instead (-fopt-info-vec). Loads and stores go through the unaligned, aliasing variant.
template <class T, int W>
struct VecOf {
  typedef T type __attribute__((vector_size(W)));
  typedef T unaligned __attribute__((vector_size(W), aligned(sizeof(T)), may_alias));
  typedef std::conditional_t<sizeof(T) == 4, int32_t, int64_t> lane_index;
  typedef lane_index index __attribute__((vector_size(W)));
};
template <class T, int W> using Vec = typename VecOf<T, W>::type;
template <class T, int W> constexpr int64_t kLane = W / static_cast<int>(sizeof(T));

// The vector width of the level in force: one register.
inline int isa_vector_bytes() {
  switch (cpu_isa()) {
    case Isa::Avx512: return 64;
    case Isa::Avx2: return 32;
    case Isa::Generic: break;
  }
  return 16;
}
// Runs f compiled for the level whose registers are W bytes (W from isa_vector_bytes()).
template <int W, class F>
decltype(auto) at_width(const F& f) {
  if constexpr (W == 64) return isa_detail::at_avx512(f);
  else if constexpr (W == 32) return isa_detail::at_avx2(f);
  else return f();
}
#define FG_AT_WIDTH(W, ...) ::fg::at_width<W>([&]() __attribute__((always_inline)) -> decltype(auto) { return __VA_ARGS__; })

// The sum of v's lanes, by halves: a fixed order, so a result never depends on how the work was
// split. Always inlined (a vector argument or result of a function without the level's
// instructions would change the ABI).
template <class T, int W>
[[gnu::always_inline]] inline T lane_sum(const Vec<T, W>& v) {
  if constexpr (W == sizeof(T)) {
    return v[0];
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) __attribute__((always_inline)) {
      constexpr std::size_t h = sizeof...(I);
      const Vec<T, W / 2> half = __builtin_shufflevector(v, v, I...) + __builtin_shufflevector(v, v, (I + h)...);
      return lane_sum<T, W / 2>(half);
    }(std::make_index_sequence<kLane<T, W> / 2>{});
  }
}

}  // namespace fg
