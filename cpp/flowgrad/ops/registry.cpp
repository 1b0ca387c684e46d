#include "flowgrad/ops/registry.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <sstream>

#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "flowgrad/ops/decompose.h"
#include "flowgrad/ops/dispatch.h"

namespace fg {
namespace {

std::atomic<uint64_t> g_kernel_calls{0};

DispatchMode* top(const ExecContext& c, ModeKind kind) { return c.modes[static_cast<size_t>(kind)]; }

// Calls f on each mode of `kind` on this thread, innermost first; an empty stack costs one load.
template <class F>
void each_mode(const ExecContext& c, ModeKind kind, F&& f) {
  for (DispatchMode* mode = top(c, kind); mode; mode = mode->outer()) f(*mode);
}

Device op_device(const OpDef& op, TensorList in, const Attrs& attrs) {
  // A random op's pair input may be a host pair (eager calls): its attributes name its device.
  if (in.empty() || op.in(Group::Random)) return attrs.get<Device>("device");
  Device device = in[0].device();
  for (size_t i = 1; i < in.size(); ++i)
    FG_CHECK(in[i].device() == device, Device, op.name,
             ": expected all tensors on one device, got ", device.str(), " (input 0) and ",
             in[i].device().str(), " (input ", i, ")");
  return device;
}

Tensors allocate(const Specs& specs, Device device) {
  Tensors out;
  out.reserve(specs.size());
  for (const TensorSpec& s : specs) out.push_back(Tensor::empty(s.shape, s.dtype, device));
  return out;
}

using Kernel = decltype(OpDef::cpu);

// The kernel on fresh outputs. Its inputs have dtypes it computes in: a half call of an op without
// half kernels was widened, a mixed-dtype call promoted, into ops before (decompose.h).
Tensors run_kernel(const OpDef& op, Kernel kernel, const KernelEnv& env, Device device, TensorList in,
                   const Specs& specs, const Attrs& attrs) {
  g_kernel_calls.fetch_add(1, std::memory_order_relaxed);
  Tensors out = allocate(specs, device);
  FG_CHECK(half_native(op, device) || std::none_of(out.begin(), out.end(), [](const Tensor& t) { return is_half(t.dtype()); }),
           Runtime, "internal error: '", op.name, "' has no float16/bfloat16 kernel but makes ", describe(out[0]),
           " from inputs that are not half (its front function computes in float32 and casts)");
  kernel(env, in, out, attrs);
  return out;
}

// NumPy's same_kind casting: bool -> integer -> floating, never back.
int kind_rank(DType dt) { return dt == DType::Bool ? 0 : is_integral(dt) ? 1 : 2; }

// The modes after a kernel: autograd sees `recorded_in` (an in-place op's input 0 as it was
// before the write), the trace the inputs as passed.
void after_op(const ExecContext& c, const OpDef& op, TensorList recorded_in, TensorList traced_in, Tensors& out,
              const Attrs& attrs) {
  each_mode(c, ModeKind::Autograd, [&](DispatchMode& m) { m.after(op, recorded_in, out, attrs); });
  each_mode(c, ModeKind::Trace, [&](DispatchMode& m) { m.after(op, traced_in, out, attrs); });
}

// A traced value kept past its trace has no bytes to compute with.
void check_has_data(const OpDef& op, TensorList in) {
  for (size_t i = 0; i < in.size(); ++i)
    FG_CHECK(!in[i].storage()->is_shape_only(), Value, op.name, ": input ", i, " (", describe(in[i]), ") is a "
             "shape-only value from fg.compile's trace and has no data; keep no traced value past the compile");
}

// The innermost trace mode decides; without one the kernel runs.
Dispatch dispatch_of(const ExecContext& c, const OpDef& op, TensorList in) {
  if (DispatchMode* trace = top(c, ModeKind::Trace)) return trace->dispatch(op, in);
  check_has_data(op, in);
  return Dispatch::Kernel;
}

// Output 0 is input 0, which the kernel writes directly. A target it cannot write (strided, of
// another dtype than the result, half for an op without half kernels, overlapped by another input:
// x[1:] += x[:-1]) is written through a temporary by ops (decompose.h: op -> copy_).
// ShapesOnly (tracing) checks and records the write without making it.

Tensors run_in_place(const ExecContext& c, const OpDef& op, Kernel kernel, const KernelEnv& env, TensorList in,
                     const Specs& specs, const Attrs& attrs, Dispatch dispatch) {
  const Tensor& target = in[0];
  check_writable(target, op.name);
  FG_CHECK(specs[0].shape == target.shape(), Shape, op.name, ": the result has shape ",
           to_string(specs[0].shape), " but the tensor written in place has shape ", to_string(target.shape()));
  FG_CHECK(kind_rank(specs[0].dtype) <= kind_rank(target.dtype()), DType, op.name, ": the result type ",
           dtype_name(specs[0].dtype), " cannot be written in place into ", describe(target));
  const bool via_temporary = needs_temporary(op, in, specs);
  if (!via_temporary && op.promotion) {  // the target has the result's dtype: the other inputs are cast to it
    Promotion p = op.promotion(in, specs, attrs);
    p.inputs &= ~1u;
    if (promotes(p, in)) return run_promoted(op, in, attrs, p);  // the same op: it checks the write
  }
  Tensor original;  // input 0's values before the write, when a check keeps them
  each_mode(c, ModeKind::InPlaceCheck, [&](DispatchMode& m) {
    if (Tensor kept = m.before_write(op, in); kept.defined()) original = kept;
  });
  // After the checks, so a refused write names the caller's op.
  if (via_temporary) return run_via_temporary(op, in, attrs, specs);
  if (dispatch == Dispatch::Kernel) {
    g_kernel_calls.fetch_add(1, std::memory_order_relaxed);
    kernel(env, in, Tensors{target}, attrs);
  }
  bump_version(target);
  Tensors out{target};
  Tensors recorded = in.vec();
  recorded[0] = original;
  after_op(c, op, recorded, in, out, attrs);
  return out;
}

}  // namespace

KernelEnv current_env(Device device) {
  return {device.is_cuda() ? cuda::current_stream_handle(device.index) : 0, nullptr, allow_tf32()};
}

uint64_t kernel_calls() { return g_kernel_calls.load(std::memory_order_relaxed); }

std::string Attrs::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < items_.size(); ++i) {
    os << (i ? ", " : "") << items_[i].first << "=";
    std::visit([&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, Dims>) os << to_string(v);
      else if constexpr (std::is_same_v<V, DType>) os << dtype_name(v);
      else if constexpr (std::is_same_v<V, Device>) os << v.str();
      else os << v;
    }, items_[i].second);
  }
  return os.str();
}

void Attrs::set(const char* name, AttrValue value) {
  for (auto& [key, v] : items_)
    if (std::string_view(key) == name) return void(v = std::move(value));
  fail(ErrorKind::Runtime, "internal error: missing op attribute '", name, "'");
}

const char* family_name(Family f) {
  switch (f) {
    case Family::Creation: return "creation";
    case Family::Unary: return "unary";
    case Family::Binary: return "binary";
    case Family::Ternary: return "ternary";
    case Family::Reduce: return "reduce";
    case Family::Linalg: return "linalg";
    case Family::Movement: return "movement";
    case Family::Copy: return "copy";
    case Family::Index: return "index";
    case Family::NN: return "nn";
    case Family::Optim: return "optim";
  }
  return "?";
}

const char* cuda_missing_reason(const OpDef& op) {
  if (op.cuda_missing) return op.cuda_missing;
#if defined(FLOWGRAD_HAVE_CUDA)
  return "no CUDA kernel is registered";  // the registry test keeps this from happening
#else
  return "flowgrad was built without CUDA";
#endif
}

std::span<const OpDef* const> all_ops() {
  static const std::array<const OpDef*, kOpCount> ops = [] {
    std::array<const OpDef*, kOpCount> rows{
#define FG_OP(name, groups, autocast) op_rows::name,
#include "flowgrad/base/ops.def"
    };
    for (size_t i = 0; i < kOpCount; ++i)  // FG_REGISTER(x) registered k_x: its id and name must be x's
      FG_CHECK(rows[i]->id == static_cast<OpId>(i) && rows[i]->name == op_name(rows[i]->id), Runtime,
               "internal error: table row '", op_name(static_cast<OpId>(i)), "' registered the OpDef of '",
               rows[i]->name, "'");
    return rows;
  }();
  return ops;
}

Dispatch DispatchMode::dispatch(const OpDef& op, TensorList in) {
  check_has_data(op, in);
  return Dispatch::Kernel;
}

void install_mode(ModeKind kind, DispatchMode* mode) {
  FG_CHECK(kind != ModeKind::Trace, Runtime, "internal error: trace modes are pushed by a ModeGuard");
  DispatchMode*& resident = resident_modes()[static_cast<size_t>(kind)];
  mode->outer_ = resident;
  resident = mode;
  context().modes[static_cast<size_t>(kind)] = mode;  // this thread's context may predate the install
}

ModeGuard::ModeGuard(DispatchMode* mode) : context_(context()), mode_(mode) {
  DispatchMode*& head = context_.modes[static_cast<size_t>(ModeKind::Trace)];
  mode->outer_ = head;
  head = mode;
}

ModeGuard::~ModeGuard() {  // guards may end out of order (a tracer stopped early): unlink, wherever it is
  DispatchMode*& head = context_.modes[static_cast<size_t>(ModeKind::Trace)];
  if (head == mode_) {
    head = mode_->outer_;
    return;
  }
  for (DispatchMode* m = head; m; m = m->outer_)
    if (m->outer_ == mode_) m->outer_ = mode_->outer_;
}

void notify_host_read(const Tensor& t, const char* what) {
  each_mode(context(), ModeKind::Trace, [&](DispatchMode& m) { m.on_host_read(t, what); });
}


Tensors run_op(const OpDef& op, TensorList in, const Attrs& attrs) {
  const ExecContext& c = context();
  Device device = op_device(op, in, attrs);
  std::optional<Tensors> replaced;
  each_mode(c, ModeKind::Autocast, [&](DispatchMode& m) {
    if (!replaced) replaced = m.replace_inputs(op, in, device);
  });
  if (replaced) return run_op(op, *replaced, attrs);
  // Before the shape rule: some rules read values (nonzero's count) and must only see host data.
  FG_CHECK(device.is_cpu() || op.cuda || op.in(Group::View), Device, op.name, ": no kernel for ", device.str(), " (",
           cuda_missing_reason(op), ")");
  Dispatch dispatch = dispatch_of(c, op, in);
  FG_CHECK(!(dispatch == Dispatch::ShapesOnly && op.in(Group::DataDependent)), Value, "compile: '", op.name,
           "' has an output shape that depends on its input values; plans need static shapes");
  Specs specs = op.shape_rule(in, attrs);
  std::optional<cuda::DeviceGuard> on_device;  // kernels launch on the current device's stream
  if (device.is_cuda()) on_device.emplace(device.index);
  const KernelEnv env = current_env(device);  // after the guard: the stream of the op's device
  if (op.in(Group::InPlace))
    return run_in_place(c, op, device.is_cpu() ? op.cpu : op.cuda, env, in, specs, attrs, dispatch);
  if (widens(op, in)) return run_widened(op, in, attrs, specs);
  if (op.promotion)
    if (Promotion p = op.promotion(in, specs, attrs); promotes(p, in)) return run_promoted(op, in, attrs, p);
  for (size_t i = 0; i < in.size(); ++i)
    if (op.mutated_inputs(i)) check_writable(in[i], op.name);
  Tensors out;
  if (op.in(Group::View)) {
    out.push_back(op.view(in[0], specs[0], attrs));
  } else if (dispatch == Dispatch::ShapesOnly) {  // tracing: outputs without bytes, no kernel
    for (const TensorSpec& s : specs) out.push_back(Tensor::shape_only(s.shape, s.dtype, device));
  } else if (device.is_cpu()) {
    out = run_kernel(op, op.cpu, env, device, in, specs, attrs);
  } else if (op.cuda) {
    out = run_kernel(op, op.cuda, env, device, in, specs, attrs);
  } else {
    fail(ErrorKind::Device, op.name, ": no kernel for ", device.str(), " (", cuda_missing_reason(op), ")");
  }
  for (size_t i = 0; i < in.size(); ++i)
    if (op.mutated_inputs(i)) bump_version(in[i]);
  after_op(c, op, in, in, out, attrs);
  return out;
}

}  // namespace fg
