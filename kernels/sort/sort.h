// CUDA sort/topk and nonzero (CUDA builds only), with the CPU kernels' layouts (index.h).
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

// Sorts each line of x (outer, d, inner) along d into values/indices (outer, k, inner), keeping
// the first k: stable, NaN the largest value, -0.0 equal to +0.0, as on the CPU. The lines
// are sorted together by two stable CUB radix sorts (order-preserving unsigned keys, then line
// numbers), with no host synchronisation: sorts and topk can be captured.
// `workspace` holds sort_cuda_workspace(env, ...) bytes of device memory.
int64_t sort_cuda_workspace(const KernelEnv& env, DType dtype, int64_t lines, int64_t d);
void sort_cuda(const KernelEnv& env, DType dtype, const void* x, int64_t outer, int64_t d, int64_t inner, int64_t k,
               bool descending, void* values, int64_t* indices, void* workspace);

// nonzero in two steps: the count (written to count[0] on the device; the op reads it on the
// host to size the output, so nonzero is never captured), then the (count, ndim) coordinates
// from an exclusive scan of the mask. `workspace` holds nonzero_cuda_workspace(env, n) bytes.
void count_true_cuda(const KernelEnv& env, const bool* mask, int64_t n, int64_t* count);
int64_t nonzero_cuda_workspace(const KernelEnv& env, int64_t n);
void nonzero_cuda(const KernelEnv& env, const bool* mask, const int64_t* shape, int ndim, int64_t* coords, void* workspace);

// one_hot: out (n, classes) = 1 where the column is idx[row] (validated, in [0, classes)).
void one_hot_cuda(const KernelEnv& env, const int64_t* idx, int64_t n, int64_t classes, int64_t* out);

}  // namespace fg
