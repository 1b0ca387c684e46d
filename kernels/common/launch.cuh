// Launch helpers shared by the CUDA kernel files: the streams, the block size, a grid for n elements
// (grid-stride loops cover the rest), the grid-stride loop itself, and the launch check that
// turns a failed launch into a DeviceError naming the op.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "flowgrad/base/errors.h"
#include "flowgrad/base/kernel_env.h"

namespace fg {

constexpr int kThreads = 256;

inline int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16));
}

// One block per row (kernels that combine a row's values in shared memory).
inline unsigned grid_rows(int64_t rows, const char* what) {
  FG_CHECK(rows <= INT32_MAX, Value, what, " on cuda: ", rows, " rows exceed one launch");
  return static_cast<unsigned>(rows);
}

// Every kernel launch, CUB call, memset, copy and cuBLAS call takes its stream from the
// KernelEnv its caller passed (base/kernel_env.h): run_op fills it with this thread's current
// stream of the op's device (the legacy default stream unless fg.cuda.stream / a graph branch /
// a capture set another), a compiled plan with the stream it runs on. Never an implicit stream:
// scripts/check_cuda_streams.py fails the build's tests on one.
//
// kernel_stream(env) is the stream argument of a <<<...>>> launch and of nothing else: it counts
// the launch for the capture self-check (captured_graph.cu), which compares the count with the
// kernel nodes the graph captured. Library calls and memsets take library_stream(env) inside a
// cuda::LibraryKernels scope, which measures the kernels the library queued.
inline cudaStream_t kernel_stream(const KernelEnv& env) {
  cuda::count_launch();
  return reinterpret_cast<cudaStream_t>(env.stream);
}
inline cudaStream_t library_stream(const KernelEnv& env) { return reinterpret_cast<cudaStream_t>(env.stream); }

inline void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  FG_CHECK(err == cudaSuccess, Device, what, " on cuda: kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace fg

// for (int64_t i = <this thread's first element>; i < n; i += <threads in the grid>)
#define FG_GRID_LOOP(i, n)                                                                  \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
