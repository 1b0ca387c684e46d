// CUDA graph capture of a whole plan (capture.h). On the second call of a CUDA plan its
// instructions are captured on a capture stream into one graph; every later call copies the
// inputs into their slots, writes the Philox pair only if the host's generator moved elsewhere,
// and launches the graph. Hyper-parameters and step counters are device tensors the optimizer
// kernels read, so replays see scheduler changes; the Philox base is advanced by a kernel inside
// the graph, so replays draw fresh, reproducible random values.
#include "flowgrad/plan/capture.h"

#include "flowgrad/core/env.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/graph.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/plan/plan.h"
#if defined(FLOWGRAD_HAVE_CUDA)
#include "kernels/creation/creation.h"
#endif

namespace fg::plan {

std::string capture_blocker(const Plan& plan, Device device) {
  if (device.is_cpu()) return "not used: a CPU plan";
  if (!env::cuda_graphs()) return "off: FLOWGRAD_NO_CUDA_GRAPH=1 (the plan runs as a flat loop of launches)";
  const auto& code = plan.instructions();
  for (size_t i = 0; i < code.size(); ++i)
    if (code[i].op->flags & kDataDependent)
      return "not captured: instruction " + std::to_string(i) + " (" + code[i].op->name +
             ") needs the host (its output shape depends on values); the plan runs as a flat loop of launches";
  return "";
}

Capture::Capture(Plan& plan) : plan_(plan) {
  status_ = capture_blocker(plan, plan.device());
  if (status_.empty()) {
    phase_ = Phase::WarmUp;
    status_ = "pending: the step is captured into a CUDA graph on its second call, after one warm-up run";
  }
  plan_.stats_.cuda_graph = status_;
}

Capture::~Capture() = default;

bool Capture::run() {
  switch (phase_) {
    case Phase::Off: return false;
    case Phase::WarmUp: phase_ = Phase::Capture; return false;
    case Phase::Capture:
      try_capture();
      plan_.stats_.cuda_graph = status_;
      if (phase_ != Phase::Replay) return false;
      break;
    case Phase::Replay: break;
  }
  sync_philox();
  graph_->launch(cuda::current_stream_handle(plan_.device().index));
  ++replays_;
  return true;
}

// The device pair must hold {seed, base} of this call's draws: the graph advanced it after the
// last replay, so it is written only when something else moved the host generator in between
// (fg.manual_seed, eager random ops).
void Capture::sync_philox() {
  if (plan_.rng_advance_ == 0) return;
  uint64_t seed = rng_state().seed;
  uint64_t base = rng_reserve(static_cast<uint64_t>(plan_.rng_advance_));
  if (!philox_known_ || seed != philox_seed_ || base != philox_base_) {
    const uint64_t pair[2] = {seed, base};
    cuda::copy_bytes(philox_.data_ptr(), philox_.device(), pair, cpu_device(), sizeof pair);
  }
  philox_seed_ = seed;
  philox_base_ = base + static_cast<uint64_t>(plan_.rng_advance_);
  philox_known_ = true;
}

void Capture::try_capture() {
  const Device device = plan_.device();
  const uint64_t advance = static_cast<uint64_t>(plan_.rng_advance_);
  if (advance > 0 && !philox_.defined()) philox_ = Tensor::empty(Dims{2}, DType::Int64, device);  // before capture
  for (Instruction& ins : plan_.code_)
    if (ins.rng_delta >= 0) ins.attrs.set("offset", ins.rng_delta);  // relative to the device base
  auto* counter = philox_.defined() ? static_cast<uint64_t*>(philox_.data_ptr()) : nullptr;
  cuda::CaptureResult r;
  {
#if defined(FLOWGRAD_HAVE_CUDA)
    set_capture_philox(counter);
    struct Reset {
      ~Reset() { set_capture_philox(nullptr); }
    } reset;
#endif
    r = cuda::capture(device.index, [&](const std::function<void(int)>& progress) {
      plan_.execute(&progress);
#if defined(FLOWGRAD_HAVE_CUDA)
      if (counter) advance_philox_cuda(counter, advance);
#endif
    });
  }
  if (!r.graph) {
    phase_ = Phase::Off;
    std::string where;
    if (r.step >= 0)
      where = " at instruction " + std::to_string(r.step) + " (" + plan_.code_[r.step].op->name + ")";
    status_ = "fallback to plain execution: capture failed" + where + ": " + r.why;
    return;
  }
  graph_ = std::move(r.graph);
  phase_ = Phase::Replay;
  status_ = "captured: one CUDA graph of " + std::to_string(graph_->nodes()) +
            " nodes, replayed per call with cudaGraphLaunch";
}

}  // namespace fg::plan
