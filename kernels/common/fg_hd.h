// Host/device portability macros shared by every kernel family.
#pragma once
#if defined(__CUDACC__)
#define FG_HD __host__ __device__ __forceinline__
#else
#define FG_HD inline
#endif
