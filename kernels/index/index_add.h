// index_add (the backward of index_select and of embedding) and the device-side index check.
// Layouts as in index.h: out (outer, d, inner), src (outer, n, inner), one index per position
// along n, shared by every outer slice and read directly (never expanded to src's shape).
#pragma once
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/base/device_error.h"

namespace fg {

// out[o, idx[i], :] += src[o, i, :]; accumulates into out. Every output row is summed by one
// worker in index order, so the result is deterministic and equals a sequential loop's.
void index_add_cpu(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer, int64_t d,
                   int64_t n, int64_t inner, void* out);

// CUDA builds only. The same sum without atomics: the index is radix-sorted (stable) and each
// run of equal indices is summed by one block, in index order (deterministic). `workspace`
// holds index_add_cuda_workspace(env, n, d) bytes of device memory.
int64_t index_add_cuda_workspace(const KernelEnv& env, int64_t n, int64_t d);
void index_add_cuda(const KernelEnv& env, DType dtype, const void* src, const int64_t* idx, int64_t outer, int64_t d,
                    int64_t n, int64_t inner, void* out, void* workspace);

// out[i] = idx[i] wrapped into [0, size); an index outside [-size, size) is reported through
// the device error record (raised at the next host synchronisation, naming op and dim) and
// replaced by 0 so the kernels that read `out` stay in bounds. Requires size > 0 when n > 0.
void wrap_index_cuda(const KernelEnv& env, const int64_t* idx, int64_t n, int64_t size, IndexCheckOp op, int dim,
                     int64_t* out);

}  // namespace fg
