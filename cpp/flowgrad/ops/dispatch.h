// The dispatch modes: everything run_op does around an op besides its shape rule and kernel, as
// an explicit ordered stack (PyTorch's dispatch keys, JAX's trace stack). run_op walks the kinds
// in ModeKind order: autocast replaces the inputs first (its casts are ordinary ops, so autograd
// and the tracer see them), the in-place check runs before a write, autograd records after the
// kernel, and the trace sees the call last.
#pragma once
#include <optional>

#include "flowgrad/ops/registry.h"

namespace fg {

enum class ModeKind { Autocast, InPlaceCheck, Autograd, Trace };
constexpr int kModeKinds = 4;

class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  // Autocast: the inputs the op runs on instead of `in`, or nothing.
  virtual std::optional<Tensors> replace_inputs(const OpDef&, TensorList, Device) { return std::nullopt; }
  // In-place check, before an in-place op writes input 0: raises to forbid the write; returns
  // the tensor after() sees as input 0 (a copy of its old values) or an undefined tensor.
  virtual Tensor before_write(const OpDef&, TensorList) { return Tensor(); }
  // Autograd and trace, after the kernel ran. For an in-place op, out[0] is the written tensor;
  // autograd's in[0] is what before_write returned, the trace's is the written tensor.
  virtual void after(const OpDef&, TensorList, Tensors&, const Attrs&) {}
  // Trace: `what` reads t's values on the host (item, numpy, tolist...).
  virtual void on_host_read(const Tensor&, const char*) {}

 private:
  friend class ModeGuard;
  friend void install_mode(ModeKind, DispatchMode*);
  friend struct ModeWalk;
  DispatchMode* outer_ = nullptr;  // the mode of the same kind that this one was pushed over
};

// Autocast, in-place check and autograd modes are resident: installed once (at module import)
// for the life of the process, and walked without a lock.
void install_mode(ModeKind kind, DispatchMode* mode);

// A trace mode (the compile tracer) is scoped: pushed for the guard's life, the innermost first
// to see a call. Walks of the trace kind take a lock, so calls from pool threads reach a trace
// one at a time and a mode is never popped while it is being told of a call.
class ModeGuard {
 public:
  explicit ModeGuard(DispatchMode* mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  DispatchMode* mode_;
};

// The trace kind's base: told of every op after it ran (the outputs read-only).
class OpObserver : public DispatchMode {
 public:
  virtual void on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) = 0;
  void after(const OpDef& op, TensorList in, Tensors& out, const Attrs& attrs) final { on_op(op, in, out, attrs); }
};

}  // namespace fg
