// The handle of a CUDA stream, an opaque integer so that code without CUDA headers (core,
// bindings, the plan executor) can hold one. The streams themselves live in cuda/stream.h.
#pragma once
#include <cstdint>

namespace fg::cuda {

using StreamHandle = uintptr_t;  // a cudaStream_t; 0 is the legacy default stream

// Counts one kernel launch of this thread for the capture self-check (cuda/stream.h's
// LaunchCount; defined in cuda/stream.cu, a no-op without CUDA). Declared here so that
// kernels/common/launch.cuh counts its launches without including the device runtime.
void count_launch();

}  // namespace fg::cuda
