// Runtime dispatch for hot vectorised CPU loops, by instruction-set level. A portable build
// (FLOWGRAD_NATIVE=OFF) targets baseline x86-64 (SSE2); a loop marked FG_CPU_KERNEL (always
// inlined) and called through FG_AT_ISA(call) is compiled three times, inlined into a copy of the
// call for each level, and runs in the one that cpu_isa() names:
//   Generic  the build's baseline (SSE2 on a portable build)
//   Avx2     x86-64-v3: AVX2 with FMA (AVX2 alone would leave every polynomial without FMA)
//   Avx512   x86-64-v4: AVX-512 F, BW, CD, DQ and VL
// cpu_isa() is the best level the machine runs unless FLOWGRAD_ISA asks for a lower one (set at
// import: set_cpu_isa), so one machine runs and times every level up to its own. The levels are
// ISA lists, not arch= names: GCC inlines a function only into one of the same arch.
#pragma once
#include <cstdint>
#include <string_view>

namespace fg {

enum class Isa { Generic, Avx2, Avx512 };  // in increasing order

Isa cpu_isa();          // the level kernels run at
Isa cpu_isa_machine();  // the best level this machine (and this build's baseline) runs
Isa cpu_isa_baseline(); // the level every function of this build is compiled for (native builds: above Generic)
std::string_view isa_name(Isa isa);  // "generic", "avx2", "avx512"
// The level a FLOWGRAD_ISA value asks for ("" : the machine's); a ValueError for an unknown name,
// a level above the machine's or below the build's baseline. Pure, for tests: the machine passed in.
Isa isa_for(std::string_view asked, Isa machine, Isa baseline);
// Sets cpu_isa() (isa_for on this machine); call while no kernel runs.
Isa set_cpu_isa(std::string_view asked);

// The bytes of one core's own cache (L2), as the C library reads them from the CPU; 1 MiB where it
// cannot. What a loop can keep next to one core from one pass to the next.
int64_t core_cache_bytes();

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FG_TARGET_AVX2 __attribute__((target("avx2,fma,bmi,bmi2,f16c,lzcnt,movbe,popcnt")))
#define FG_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma,bmi,bmi2,f16c,lzcnt,movbe,popcnt")))
#define FG_CPU_LEVELS 1
#else
#define FG_TARGET_AVX2
#define FG_TARGET_AVX512
#define FG_CPU_LEVELS 0
#endif

namespace isa_detail {
template <class F> FG_TARGET_AVX512 decltype(auto) at_avx512(const F& f) { return f(); }
template <class F> FG_TARGET_AVX2 decltype(auto) at_avx2(const F& f) { return f(); }
}  // namespace isa_detail

// f() compiled for, and run at, cpu_isa(): f and what it inlines take each level's instructions.
template <class F>
decltype(auto) at_isa(const F& f) {
#if FG_CPU_LEVELS
  switch (cpu_isa()) {
    case Isa::Avx512: return isa_detail::at_avx512(f);
    case Isa::Avx2: return isa_detail::at_avx2(f);
    case Isa::Generic: break;
  }
#endif
  return f();
}

}  // namespace fg

// A loop to compile per level: always inlined, so it takes the instructions of its caller.
#define FG_CPU_KERNEL [[gnu::always_inline]] inline
// Runs the expression (a call of an FG_CPU_KERNEL) at cpu_isa().
#define FG_AT_ISA(...) ::fg::at_isa([&]() __attribute__((always_inline)) -> decltype(auto) { return __VA_ARGS__; })
