// Host/device portability macros shared by every kernel family.
#pragma once
#if defined(__CUDACC__)
#define FG_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__)
// Forced inline: in a -fPIC library a plain inline function may stay an interposable call,
// which keeps elementwise loops from vectorising.
#define FG_HD inline __attribute__((always_inline))
#else
#define FG_HD inline
#endif
