// Indexing kernels over contiguous (outer, d, inner) blocks. Index values are int64 and
// already validated and wrapped to [0, d) by the op layer.
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

// out (outer, n, inner)[o, i, j] = x (outer, d, inner)[o, idx[o, i, j], j]
void gather_cpu(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d,
                int64_t n, int64_t inner, void* out);
// out (outer, d, inner)[o, idx[o, i, j], j] += src (outer, n, inner)[o, i, j]; accumulates.
void scatter_add_cpu(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer,
                     int64_t d, int64_t n, int64_t inner, void* out);
// out (outer, n, inner)[o, i, :] = x (outer, d, inner)[o, idx[i], :]
void index_select_cpu(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d,
                      int64_t n, int64_t inner, void* out);
// The same three on CUDA device memory (CUDA builds only).
void gather_cuda(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d,
                 int64_t n, int64_t inner, void* out);
void scatter_add_cuda(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer,
                      int64_t d, int64_t n, int64_t inner, void* out);
void index_select_cuda(const KernelEnv& env, DType dtype, const void* x, const int64_t* idx, int64_t outer, int64_t d,
                       int64_t n, int64_t inner, void* out);
// out (n)[idx[i]] = src (k)[i]: on the CPU in order (a repeated index keeps the last value), on
// CUDA in parallel (a repeated index keeps one of its values). Copies bytes: any dtype.
void index_put_cpu(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t k, void* out);
void index_put_cuda(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t k, void* out);
// Sorts each line of x (outer, d, inner) along d into values/indices (outer, k, inner),
// keeping the first k (k = d for a full sort). Stable; NaN sorts as the largest value.
void sort_cpu(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t d, int64_t inner, int64_t k,
              bool descending, void* values, int64_t* indices);
// Positions of the true elements of a bool tensor as (count, ndim) rows of coordinates.
int64_t count_true_cpu(const KernelEnv& env, const bool* mask, int64_t n);
void nonzero_cpu(const KernelEnv& env, const bool* mask, const int64_t* shape, int ndim, int64_t* coords);

}  // namespace fg
