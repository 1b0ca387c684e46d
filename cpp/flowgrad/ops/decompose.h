// The dispatch-level rewrites run_op applies after autocast (ops/decompose.cpp): calls a kernel
// cannot run as made become ordinary op calls that it can, so autograd and the compile tracer see
// them, and a compiled plan runs what eager code runs.
#pragma once
#include "flowgrad/ops/registry.h"

namespace fg {

// Whether op's kernels on `device` take float16/bfloat16 inputs themselves.
inline bool half_native(const OpDef& op, Device device) {
  return (op.flags & kHalfNative) && !((op.flags & kHalfWidenedOnCpu) && device.is_cpu());
}

// Widen: whether `op` has no float16/bfloat16 kernels on the call's device (no kHalfNative, or
// kHalfWidenedOnCpu on the CPU) and gets a half input.
bool widens(const OpDef& op, TensorList in);
// cast(float32) -> op -> cast(back): the half inputs widened, the outputs narrowed to `specs`.
Tensors run_widened(const OpDef& op, TensorList in, const Attrs& attrs, const Specs& specs);

// Promote: the call with each input `p` names (promotes(p, in), registry.h) cast to p.dtype.
Tensors run_promoted(const OpDef& op, TensorList in, const Attrs& attrs, const Promotion& p);

// InPlaceViaTemp: whether an in-place call cannot write its target directly: the target is
// strided or not of the result's dtype, the op widens, or another input overlaps the target.
bool needs_temporary(const OpDef& op, TensorList in, const Specs& specs);
// op on a contiguous copy of the target (in the compute dtype) -> copy_ into the target.
Tensors run_via_temporary(const OpDef& op, TensorList in, const Attrs& attrs, const Specs& specs);

}  // namespace fg
