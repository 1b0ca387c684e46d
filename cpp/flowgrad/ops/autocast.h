// Autocast: inside fg.autocast(device_type, dtype), ops on that device run in a chosen precision.
// The policy is PyTorch's: GEMM-like ops run in the low dtype (bfloat16/float16), ops that
// need range or accumulate (reductions, softmax, norms, exp/log, pow) in float32, and every
// other op follows its inputs. run_op applies it before the shape rule by casting inputs with
// the public cast op, so autograd and the plan tracer see each cast as an ordinary op.
#pragma once
#include <cstdint>
#include <optional>

#include "flowgrad/core/context.h"
#include "flowgrad/core/device.h"
#include "flowgrad/base/dtype.h"
#include "flowgrad/ops/registry.h"

namespace fg {

// An op's policy is its op table row's (autocast_policy(op.id), op_table.h).
// The state (AutocastState, core/context.h) is per thread and device type (cpu, cuda), like torch.autocast.
AutocastState autocast_state(DeviceType type);
void set_autocast_state(DeviceType type, AutocastState state);

// The inputs op should run on under the current thread's autocast state, or nothing when they
// are already right (the common case: autocast off, or a follow-inputs op).
std::optional<Tensors> autocast_inputs(const OpDef& op, TensorList in, Device device);
// Installs the autocast dispatch mode, which applies autocast_inputs (once, at module import).
void install_autocast();

// AutocastScope off({}) (core/context.h) turns autocast off for a scope (the autograd engine:
// gradients follow the forward's dtypes).

}  // namespace fg
