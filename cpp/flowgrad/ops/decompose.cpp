// Dispatch-level rewrites (decompose.h), as PyTorch's decompositions: each emits ordinary op calls.
//   Widen:          an op without half kernels on float16/bfloat16 inputs runs as
//                   cast(float32) -> op -> cast(back).
//   Promote:        a mixed-dtype call (int + float, a float32 norm weight on a float64 input, an
//                   additive mask, a scatter source) runs as cast(compute dtype) of the inputs the
//                   op's Promotion names -> op: the kernel gets its compute dtype and converts
//                   nothing; the gradient of each cast input comes back in its own dtype.
//   InPlaceViaTemp: an in-place op whose target it cannot write directly runs on a contiguous
//                   temporary of the compute dtype, then copy_ writes the target (any layout, any
//                   dtype); an input overlapping the target is read before copy_ writes.
// Autocast is off inside: the float32 calls are meant, not a policy's to narrow again. The widening
// casts of inputs are not scanned by detect_anomaly (exact: a NaN or Inf there is the input's, its
// producer's to report); the op itself and the narrowing casts are.
#include "flowgrad/ops/decompose.h"

#include "flowgrad/core/context.h"
#include "flowgrad/ops/ops.h"

namespace fg {
namespace {

// The inputs with each half one cast to float32.
Tensors widened(TensorList in) {
  AnomalyScan exact(true);
  Tensors out;
  out.reserve(in.size());
  for (const Tensor& t : in) out.push_back(is_half(t.dtype()) ? cast(t, DType::Float32) : t);
  return out;
}

bool any_half(TensorList in) {
  for (const Tensor& t : in)
    if (is_half(t.dtype())) return true;
  return false;
}

// copy_ and its renamings (uniform_, normal_) write any layout and dtype themselves.
bool writes_any_layout(const OpDef& op) {
  return op.id == OpId::copy_ || op.id == OpId::uniform_ || op.id == OpId::normal_;
}

// Input i shares the target's memory in a way the kernel cannot read while it writes: any overlap
// for a non-elementwise op, a different view for an elementwise one (the same view reads each
// element before writing it).
bool overlaps(const OpDef& op, const Tensor& target, const Tensor& t) {
  if (t.storage() != target.storage()) return false;
  return !op.in(Group::Elementwise) || t.offset() != target.offset() || t.strides() != target.strides() ||
         t.shape() != target.shape();
}

}  // namespace

bool widens(const OpDef& op, TensorList in) {
  if ((op.flags & kHalfNative) && !(op.flags & kHalfWidenedOnCpu)) return false;  // the common case: one test
  return !op.in(Group::View) && any_half(in) && !half_native(op, in[0].device());
}

Tensors run_promoted(const OpDef& op, TensorList in, const Attrs& attrs, const Promotion& p) {
  AutocastScope off({});
  Tensors args = in.vec();
  for (uint32_t bits = p.inputs; bits; bits &= bits - 1) {
    Tensor& t = args[static_cast<size_t>(__builtin_ctz(bits))];
    if (t.dtype() != p.dtype) t = cast(t, p.dtype);
  }
  return run_op(op, std::move(args), attrs);
}

Tensors run_widened(const OpDef& op, TensorList in, const Attrs& attrs, const Specs& specs) {
  AutocastScope off({});
  Tensors out = run_op(op, widened(in), attrs);
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].defined() && out[i].dtype() != specs[i].dtype) out[i] = cast(out[i], specs[i].dtype);
  return out;
}

bool needs_temporary(const OpDef& op, TensorList in, const Specs& specs) {
  const Tensor& target = in[0];
  bool overlapped = false;
  for (size_t i = 1; i < in.size(); ++i) overlapped |= overlaps(op, target, in[i]);
  if (writes_any_layout(op)) return overlapped;
  return overlapped || !target.is_contiguous() || specs[0].dtype != target.dtype() || widens(op, in);
}

Tensors run_via_temporary(const OpDef& op, TensorList in, const Attrs& attrs, const Specs& specs) {
  AutocastScope off({});
  const Tensor& target = in[0];
  Tensors args = in.vec();
  if (writes_any_layout(op)) {  // only an overlapping source: read it first
    args[1] = clone(in[1]);
    return run_op(op, std::move(args), attrs);
  }
  const bool wide = widens(op, in);
  const DType compute = wide ? DType::Float32 : specs[0].dtype;
  if (wide) args = widened(in);  // a half target's cast is the temporary already
  if (args[0].is_same(target)) {
    AnomalyScan exact(true);  // a copy of the target's values, as the widening casts
    args[0] = target.dtype() == compute ? clone(target) : cast(target, compute);
  }
  run_op(op, args, attrs);  // writes the temporary: contiguous, of the result dtype, overlapping nothing
  return run_op(op_def(OpId::copy_), {target, args[0]});
}

}  // namespace fg
