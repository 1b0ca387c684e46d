#include "flowgrad/ops/autocast.h"

#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/ops.h"

namespace fg {
namespace {


size_t slot(DeviceType type) { return type == DeviceType::CPU ? 0 : 1; }

}  // namespace

AutocastState autocast_state(DeviceType type) { return context().autocast[slot(type)]; }

void set_autocast_state(DeviceType type, AutocastState state) {
  FG_CHECK(is_half(state.dtype), Value, "autocast: dtype must be bfloat16 or float16, got ", dtype_name(state.dtype));
  context().autocast[slot(type)] = state;
}

std::optional<Tensors> autocast_inputs(const OpDef& op, TensorList in, Device device) {
  const AutocastState& state = context().autocast[slot(device.type)];
  if (!state.enabled || in.empty()) return std::nullopt;
  AutocastPolicy policy = autocast_policy(op.id);
  if (policy == AutocastPolicy::FollowInputs) return std::nullopt;
  DType target = policy == AutocastPolicy::LowPrecision ? state.dtype : DType::Float32;
  // float64 stays float64 (as in PyTorch): only float32 and the half types are cast.
  auto eligible = [&](const Tensor& t) {
    return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::Float64 && t.dtype() != target;
  };
  bool any = false;
  for (const Tensor& t : in) any = any || eligible(t);
  if (!any) return std::nullopt;
  Tensors cast_in;
  cast_in.reserve(in.size());
  for (const Tensor& t : in) cast_in.push_back(eligible(t) ? cast(t, target) : t);
  return cast_in;
}

namespace {
struct AutocastMode final : DispatchMode {
  std::optional<Tensors> replace_inputs(const OpDef& op, TensorList in, Device device) override {
    return autocast_inputs(op, in, device);
  }
};
}  // namespace

void install_autocast() {
  static AutocastMode mode;
  install_mode(ModeKind::Autocast, &mode);
}

}  // namespace fg
