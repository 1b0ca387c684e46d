#include "flowgrad/ops/autocast.h"

#include "flowgrad/ops/ops.h"

namespace fg {
namespace {

thread_local AutocastState t_state[2];  // indexed by DeviceType::CPU, DeviceType::CUDA
thread_local bool t_any = false;       // either enabled: the fast exit of autocast_inputs

size_t slot(DeviceType type) { return type == DeviceType::CPU ? 0 : 1; }

}  // namespace

AutocastState autocast_state(DeviceType type) { return t_state[slot(type)]; }

void set_autocast_state(DeviceType type, AutocastState state) {
  FG_CHECK(is_half(state.dtype), Value, "autocast: dtype must be bfloat16 or float16, got ", dtype_name(state.dtype));
  t_state[slot(type)] = state;
  t_any = t_state[0].enabled || t_state[1].enabled;
}

std::optional<Tensors> autocast_inputs(const OpDef& op, TensorList in, Device device) {
  if (!t_any || in.empty()) return std::nullopt;
  const AutocastState& state = t_state[slot(device.type)];
  if (!state.enabled) return std::nullopt;
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

AutocastSuspend::AutocastSuspend() : saved_{t_state[0], t_state[1]} {
  t_state[0].enabled = t_state[1].enabled = false;
  t_any = false;
}

AutocastSuspend::~AutocastSuspend() {
  t_state[0] = saved_[0];
  t_state[1] = saved_[1];
  t_any = t_state[0].enabled || t_state[1].enabled;
}

}  // namespace fg
