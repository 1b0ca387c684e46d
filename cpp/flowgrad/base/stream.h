// The handle of a CUDA stream, an opaque integer so that code without CUDA headers (core,
// bindings, the plan executor) can hold one. The streams themselves live in cuda/stream.h.
#pragma once
#include <cstdint>

namespace fg::cuda {

using StreamHandle = uintptr_t;  // a cudaStream_t; 0 is the legacy default stream

}  // namespace fg::cuda
