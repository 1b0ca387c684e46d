// The dispatch modes: everything run_op does around an op besides its shape rule and kernel, as
// an explicit ordered stack (PyTorch's dispatch keys, JAX's trace stack) held in this thread's
// ExecContext (core/context.h), so each thread has its own. run_op walks the kinds in ModeKind
// order: autocast replaces the inputs first (its casts are ordinary ops, so autograd and the
// tracer see them), the in-place check runs before a write, autograd records after the kernel,
// and the trace sees the call last.
#pragma once
#include <optional>

#include "flowgrad/core/context.h"
#include "flowgrad/ops/registry.h"

namespace fg {

// Whether a call runs its kernel, or only applies its shape rule (fg.compile's trace).
enum class Dispatch : uint8_t { Kernel, ShapesOnly };

class DispatchMode {
 public:
  virtual ~DispatchMode() = default;
  // Autocast: the inputs the op runs on instead of `in`, or nothing.
  virtual std::optional<Tensors> replace_inputs(const OpDef&, TensorList, Device) { return std::nullopt; }
  // In-place check, before an in-place op writes input 0: raises to forbid the write; returns
  // the tensor after() sees as input 0 (a copy of its old values) or an undefined tensor.
  virtual Tensor before_write(const OpDef&, TensorList) { return Tensor(); }
  // Trace, asked of the innermost trace mode before the shape rule. The default runs the kernel,
  // after checking that no input is a shape-only value (one kept past its trace has no bytes).
  virtual Dispatch dispatch(const OpDef& op, TensorList in);
  // Autograd and trace, after the kernel ran. For an in-place op, out[0] is the written tensor;
  // autograd's in[0] is what before_write returned, the trace's is the written tensor.
  virtual void after(const OpDef&, TensorList, Tensors&, const Attrs&) {}
  // Trace: `what` reads t's values on the host (item, numpy, tolist...).
  virtual void on_host_read(const Tensor&, const char*) {}

  DispatchMode* outer() const { return outer_; }  // the mode of the same kind this one was pushed over

 private:
  friend class ModeGuard;
  friend void install_mode(ModeKind, DispatchMode*);
  DispatchMode* outer_ = nullptr;
};

// Installs a resident mode (autocast, in-place check, autograd) for the life of the process: the
// default of every thread's context. Call at start-up, before any op runs.
void install_mode(ModeKind kind, DispatchMode* mode);

// Pushes a trace mode (the compile tracer) on this thread's stack for the guard's life, the
// innermost first to see a call. Ops of other threads never reach it. Guards may end out of
// order; each ends on the thread that began it.
class ModeGuard {
 public:
  explicit ModeGuard(DispatchMode* mode);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  ExecContext& context_;
  DispatchMode* mode_;
};

// Whether a trace mode is on this thread's stack. Parallel graph levels then run their nodes one
// at a time on this thread, so a trace mode is told of calls one at a time.
inline bool tracing() { return context().modes[static_cast<size_t>(ModeKind::Trace)] != nullptr; }

// The innermost trace mode on this thread that is also a T, or null. Layers above ops find the
// hooks of an installed tracer this way (graph's ControlFlow, nn's CallObserver): one mode, one
// guard, no global slot of their own.
template <class T>
T* innermost_trace_as() {
  for (DispatchMode* m = context().modes[static_cast<size_t>(ModeKind::Trace)]; m; m = m->outer())
    if (T* found = dynamic_cast<T*>(m)) return found;
  return nullptr;
}

// The trace kind's base: told of every op after it ran (the outputs read-only).
class OpObserver : public DispatchMode {
 public:
  virtual void on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) = 0;
  void after(const OpDef& op, TensorList in, Tensors& out, const Attrs& attrs) final { on_op(op, in, out, attrs); }
};

}  // namespace fg
