// What a kernel needs from the code that launches it, passed as an argument instead of read from
// a thread-local (llm.c's habit: `layernorm_forward(..., cudaStream_t stream)`). run_op fills one
// per op call from this thread's ExecContext (core/context.h); a compiled plan fills one per run
// from its own stream and scratch block. CPU kernels take it too, so one wrapper template serves
// a CPU and a CUDA entry point of the same signature.
#pragma once
#include <cstdint>

#include "flowgrad/base/stream.h"

namespace fg {

struct KernelScratch;  // core/allocator.h

struct KernelEnv {
  cuda::StreamHandle stream = 0;     // where CUDA work goes (kernels/common/launch.cuh); 0: legacy default
  KernelScratch* scratch = nullptr;  // a plan's block for kernel temporaries; null: the allocator
  bool tf32 = false;  // float32 CUDA GEMMs may use TF32 tensor cores (fg.cuda.set_allow_tf32)
};

}  // namespace fg
