// Device side of device_error.h: how a kernel reports a bad index.
#pragma once
#include "flowgrad/base/device_error.h"

namespace fg {

// The first report per device wins; later ones (this kernel's other threads, later kernels)
// are dropped until the host has raised the first.
__device__ __forceinline__ void report_bad_index(IndexErrorSink sink, IndexCheckOp op, int dim,
                                                 int64_t value, int64_t size) {
  if (atomicCAS(sink.claimed, 0, 1) != 0) return;
  sink.record->value = value;
  sink.record->size = size;
  sink.record->op = op;
  sink.record->dim = dim;
  __threadfence_system();  // the fields reach host memory before `set` does
  sink.record->set = 1;
}

}  // namespace fg
