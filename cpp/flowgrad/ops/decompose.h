// The dispatch-level rewrites run_op applies after autocast (ops/decompose.cpp): calls a kernel
// cannot run as made become ordinary op calls that it can, so autograd and the compile tracer see
// them, and a compiled plan runs what eager code runs.
#pragma once
#include "flowgrad/ops/registry.h"

namespace fg {

// Widen: whether `op` has no float16/bfloat16 kernels (no kHalfNative) and gets a half input.
bool widens(const OpDef& op, TensorList in);
// cast(float32) -> op -> cast(back): the half inputs widened, the outputs narrowed to `specs`.
Tensors run_widened(const OpDef& op, TensorList in, const Attrs& attrs, const Specs& specs);

// InPlaceViaTemp: whether an in-place call cannot write its target directly: the target is
// strided or not of the result's dtype, the op widens, or another input overlaps the target.
bool needs_temporary(const OpDef& op, TensorList in, const Specs& specs);
// op on a contiguous copy of the target (in the compute dtype) -> copy_ into the target.
Tensors run_via_temporary(const OpDef& op, TensorList in, const Attrs& attrs, const Specs& specs);

}  // namespace fg
