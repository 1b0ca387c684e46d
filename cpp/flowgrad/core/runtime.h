// Process-wide CPU runtime state: the thread count and the global random generator.
#pragma once
#include <cstdint>

#include "flowgrad/core/context.h"  // RngState, RngStream

namespace fg {

// Threads used by CPU kernels and BLAS; starts at FLOWGRAD_NUM_THREADS (default: cores).
int num_threads();
void set_num_threads(int n);

// Global Philox generator: every random tensor draws `numel` counters starting at the
// returned offset, so (seed, offset) decides its values on any device.
void manual_seed(uint64_t seed);
RngState rng_state();
void set_rng_state(RngState s);
uint64_t rng_reserve(uint64_t counters);  // returns the first counter and advances the state

// Whether float32 CUDA matmuls may use TF32 tensor cores (fg.cuda.set_allow_tf32; off by
// default, full float32 precision). A process-wide setting, as in PyTorch; kernels see it only
// through their KernelEnv (base/kernel_env.h), which run_op and plans fill from here.
void set_allow_tf32(bool on);
bool allow_tf32();

// RngStream (core/context.h) makes random ops on this thread draw from a private generator.

}  // namespace fg
