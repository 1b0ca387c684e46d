#include <unistd.h>

#include <atomic>

#include "flowgrad/base/errors.h"
#include "kernels/common/cpu_dispatch.h"

namespace fg {
namespace {

std::atomic<Isa>& level() {
  static std::atomic<Isa> isa{cpu_isa_machine()};
  return isa;
}

}  // namespace

Isa cpu_isa_baseline() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512CD__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
  return Isa::Avx512;
#elif defined(__AVX2__) && defined(__FMA__)
  return Isa::Avx2;
#else
  return Isa::Generic;
#endif
}

Isa cpu_isa_machine() {
#if FG_CPU_LEVELS
  // The features both GCC and clang can ask; every CPU with them has the rest of its level's list
  // (F16C, LZCNT, MOVBE beside AVX2).
  static const Isa machine = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
        __builtin_cpu_supports("bmi2"))
      return Isa::Avx2;
    return Isa::Generic;
  }();
  return machine > cpu_isa_baseline() ? machine : cpu_isa_baseline();
#else
  return Isa::Generic;
#endif
}

Isa cpu_isa() { return level().load(std::memory_order_relaxed); }

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa isa_for(std::string_view asked, Isa machine, Isa baseline) {
  if (asked.empty()) return machine;
  Isa isa = Isa::Generic;
  if (asked == "avx2") isa = Isa::Avx2;
  else if (asked == "avx512") isa = Isa::Avx512;
  else FG_CHECK(asked == "generic", Value, "FLOWGRAD_ISA='", asked, "' is not 'generic', 'avx2' or 'avx512'");
  FG_CHECK(isa <= machine, Value, "FLOWGRAD_ISA='", asked, "' asks for more than this CPU runs: its level is '",
           isa_name(machine), "'; ask for that or a lower one, or unset FLOWGRAD_ISA");
  FG_CHECK(isa >= baseline, Value, "FLOWGRAD_ISA='", asked, "' is below this build's baseline '", isa_name(baseline),
           "' (built with FLOWGRAD_NATIVE: every function uses its instructions); use a portable build to run lower");
  return isa;
}

Isa set_cpu_isa(std::string_view asked) {
  Isa isa = isa_for(asked, cpu_isa_machine(), cpu_isa_baseline());
  level().store(isa, std::memory_order_relaxed);
  return isa;
}

int64_t core_cache_bytes() {
  static const int64_t bytes = [] {
#ifdef _SC_LEVEL2_CACHE_SIZE
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 > 0) return int64_t{l2};
#endif
    return int64_t{1} << 20;
  }();
  return bytes;
}

}  // namespace fg
