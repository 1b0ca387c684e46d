// Runtime dispatch for hot vectorised CPU loops. A portable build (FLOWGRAD_NATIVE=OFF) targets
// baseline x86-64 (SSE2); FG_CPU_CLONES compiles the function it marks also for x86-64-v3 (AVX2 and
// FMA: target "avx2" alone would leave every polynomial without FMA) and x86-64-v4 (AVX-512), and
// the loader picks the best one the running CPU supports (GCC target_clones, an ifunc). Empty
// where the baseline already has AVX2 (-march=native on such a CPU), for clang (which does not
// clone templates) and off x86-64.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && __GNUC__ >= 12
#define FG_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__)
#define FG_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))  // GCC < 12: no arch= levels
#else
#define FG_CPU_CLONES
#endif
