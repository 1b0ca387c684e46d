// Runtime dispatch for hot vectorised CPU loops. A portable build (FLOWGRAD_NATIVE=OFF) targets
// baseline x86-64 (SSE2); FG_CPU_CLONES compiles the function it marks also for AVX2 and AVX-512,
// and the loader picks the best one the running CPU supports (GCC target_clones, an ifunc). Empty
// where the baseline already has AVX2 (-march=native on such a CPU), for clang (which does not
// clone templates) and off x86-64.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__)
#define FG_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FG_CPU_CLONES
#endif
