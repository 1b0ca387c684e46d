#include "flowgrad/ops/registry.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <sstream>

#include "flowgrad/ops/kernel_args.h"

namespace fg {
namespace {

DispatchHook g_hook = nullptr;

// Observers are few and change only around a compile; readers take the lock only when one is
// installed (the flag), so eager dispatch pays one relaxed load.
std::mutex g_observers_mutex;
std::vector<OpObserver*> g_observers;
std::atomic<bool> g_observed{false};

Device op_device(const OpDef& op, TensorList in, const Attrs& attrs) {
  if (in.empty()) return attrs.get<Device>("device");
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

bool any_half(TensorList in, const Specs& specs) {
  for (const Tensor& t : in)
    if (is_half(t.dtype())) return true;
  for (const TensorSpec& s : specs)
    if (is_half(s.dtype)) return true;
  return false;
}

using Kernel = void (*)(TensorList, const Tensors&, const Attrs&);

// Kernels compute float16/bfloat16 through float32 unless they handle them: widen, run, narrow.
Tensors run_kernel(const OpDef& op, Kernel kernel, Device device, TensorList in, const Specs& specs,
                   const Attrs& attrs) {
  if ((op.flags & kHalfNative) || !any_half(in, specs)) {
    Tensors out = allocate(specs, device);
    kernel(in, out, attrs);
    return out;
  }
  Tensors wide_in;
  for (const Tensor& t : in) wide_in.push_back(is_half(t.dtype()) ? converted(t, DType::Float32) : t);
  Specs wide_specs = specs;
  for (TensorSpec& s : wide_specs)
    if (is_half(s.dtype)) s.dtype = DType::Float32;
  Tensors wide_out = allocate(wide_specs, device);
  kernel(wide_in, wide_out, attrs);
  Tensors out;
  for (size_t i = 0; i < specs.size(); ++i) out.push_back(converted(wide_out[i], specs[i].dtype));
  return out;
}

}  // namespace

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

const std::vector<const OpDef*>& all_ops() {
  static const std::vector<const OpDef*> ops = [] {
    std::vector<const OpDef*> all;
    for (auto family : {elementwise_ops, reduce_ops, linalg_ops, shape_ops, index_ops, nn_ops,
                        creation_ops, optim_ops})
      for (const OpDef* op : family()) all.push_back(op);
    return all;
  }();
  return ops;
}

const OpDef& find_op(const std::string& name) {
  for (const OpDef* op : all_ops())
    if (name == op->name) return *op;
  fail(ErrorKind::Value, "no op named '", name, "'");
}

void set_dispatch_hook(DispatchHook hook) { g_hook = hook; }

void push_op_observer(OpObserver* observer) {
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  g_observers.push_back(observer);
  g_observed = true;
}

void pop_op_observer(OpObserver* observer) {
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  g_observers.erase(std::remove(g_observers.begin(), g_observers.end(), observer), g_observers.end());
  g_observed = !g_observers.empty();
}

void notify_host_read(const Tensor& t, const char* what) {
  if (!g_observed.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  for (auto it = g_observers.rbegin(); it != g_observers.rend(); ++it) (*it)->on_host_read(t, what);
}

namespace {
void notify_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) {
  if (!g_observed.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  for (auto it = g_observers.rbegin(); it != g_observers.rend(); ++it) (*it)->on_op(op, in, out, attrs);
}
}  // namespace

Tensors run_op(const OpDef& op, TensorList in, const Attrs& attrs) {
  Device device = op_device(op, in, attrs);
  // Before the shape rule: some rules read values (nonzero's count) and must only see host data.
  FG_CHECK(device.is_cpu() || op.cuda || (op.flags & kView), Device, op.name, ": no kernel for ", device.str(), " (",
           op.cuda_missing, ")");
  Specs specs = op.shape_rule(in, attrs);
  Tensors out;
  if (op.flags & kView) {
    out.push_back(op.view(in[0], specs[0], attrs));
  } else if (device.is_cpu()) {
    out = run_kernel(op, op.cpu, device, in, specs, attrs);
  } else if (op.cuda) {
    out = run_kernel(op, op.cuda, device, in, specs, attrs);
  } else {
    fail(ErrorKind::Device, op.name, ": no kernel for ", device.str(), " (", op.cuda_missing, ")");
  }
  notify_op(op, in, out, attrs);
  if (g_hook) g_hook(op, in, out, attrs);
  return out;
}

}  // namespace fg
