// CUDA graph capture of a whole plan (capture.h). On the second call of a CUDA plan its
// instructions are captured on a capture stream into one graph; every later call copies the
// inputs into their slots, writes the Philox pair only if the host's generator moved elsewhere,
// and launches the graph. Hyper-parameters and step counters are device tensors the optimizer
// kernels read, so replays see scheduler changes; the Philox base is advanced by a kernel inside
// the graph, so replays draw fresh, reproducible random values. The first captured step is checked
// against a plain one from the same state (capture_check.cpp).
#include "flowgrad/plan/capture.h"

#include <chrono>

#include "flowgrad/core/env.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/captured_graph.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/plan/executable.h"
#if defined(FLOWGRAD_HAVE_CUDA)
#include "kernels/creation/creation.h"
#endif

namespace fg::plan {

std::string capture_blocker(const Executable& exec, Device device) {
  if (device.is_cpu()) return "not used: a CPU plan";
  if (!env::cuda_graphs()) return "off: FLOWGRAD_NO_CUDA_GRAPH=1 (the plan runs as a flat loop of launches)";
  const auto& code = exec.instructions();
  for (size_t i = 0; i < code.size(); ++i) {
    const std::string at = "not captured: instruction " + std::to_string(i) + " (" + op_name(code[i]);
    if (code[i].branch)  // branch.cpp reads the selector / halt value on the host
      return at + " '" + code[i].branch->label + "') decides on the host; its CUDA " + code[i].branch->conditional() +
             " conditional node is not built yet, so the plan runs as a flat loop of launches";
    if (code[i].op->in(Group::DataDependent))
      return at + ") needs the host (its output shape depends on values); the plan runs as a flat loop of launches";
  }
  return "";
}

Capture::Capture(Executable& exec) : exec_(exec) {
  status_ = capture_blocker(exec, exec.device());
  if (status_.empty()) {
    phase_ = Phase::WarmUp;
    status_ = "pending: the step is captured into a CUDA graph on its second call, after one warm-up run";
  }
}

Capture::~Capture() = default;

bool Capture::try_replay() {
  switch (phase_) {
    case Phase::Off: return false;
    case Phase::WarmUp: phase_ = Phase::Capture; return false;
    case Phase::Capture:
      try_capture();
      if (phase_ == Phase::Replay && env::capture_check() && self_check()) {  // its replay was this call's step
        ++replays_;
        return true;
      }
      if (phase_ != Phase::Replay) return false;
      break;
    case Phase::Replay: break;
  }
  sync_philox();
  graph_->launch(cuda::current_stream_handle(exec_.device().index));
  ++replays_;
  return true;
}

// The device pair must hold {seed, base} of this call's draws: the graph advanced it after the
// last replay, so it is written only when something else moved the host generator in between
// (fg.manual_seed, eager random ops).
void Capture::sync_philox() {
  const auto advance = static_cast<uint64_t>(exec_.rng_advance());
  if (advance == 0) return;
  uint64_t seed = rng_state().seed;
  uint64_t base = rng_reserve(advance);
  if (!philox_known_ || seed != philox_seed_ || base != philox_base_) {
    const uint64_t pair[2] = {seed, base};
    cuda::copy_bytes(philox_.data_ptr(), philox_.device(), pair, cpu_device(), sizeof pair);
  }
  philox_seed_ = seed;
  philox_base_ = base + advance;
  philox_known_ = true;
}

std::function<void(const std::function<void(int)>&)> Capture::device_rng_body() {
  const auto advance = static_cast<uint64_t>(exec_.rng_advance());
  if (advance > 0 && !philox_.defined())  // allocated before capture
    philox_ = Tensor::empty(Dims{2}, DType::Int64, exec_.device());
  exec_.rng_from_device_base();
  auto* counter = philox_.defined() ? static_cast<uint64_t*>(philox_.data_ptr()) : nullptr;
  return [this, counter, advance](const std::function<void(int)>& progress) {
#if defined(FLOWGRAD_HAVE_CUDA)
    CapturePhilox on_device(counter);
    exec_.execute(&progress);
    if (counter) advance_philox_cuda(current_env(exec_.device()), counter, advance);
#else
    (void)counter, (void)advance;
    exec_.execute(&progress);
#endif
  };
}

std::vector<double> Capture::profile() {
  const int n = static_cast<int>(exec_.instructions().size());
  std::vector<double> ms(n, 0.0);
  if (exec_.device().is_cpu()) {
    using Clock = std::chrono::steady_clock;
    std::vector<Clock::time_point> at(n + 1);
    exec_.draw_rng();
    std::function<void(int)> mark = [&](int i) { at[i] = Clock::now(); };
    exec_.execute(&mark);
    at[n] = Clock::now();
    for (int i = 0; i < n; ++i) ms[i] = std::chrono::duration<double, std::milli>(at[i + 1] - at[i]).count();
    return ms;
  }
  FG_CHECK(phase_ != Phase::Off, Value, "step.profile: timings of a CUDA step come from a captured graph of it, and "
           "this plan is not captured (", status_, ")");
  auto body = device_rng_body();
  sync_philox();  // the profiling graph draws like a replay and advances the pair too
  std::string why;
  int step = -1;
  ms = cuda::time_steps(exec_.device().index, n, body, &why, &step);
  FG_CHECK(why.empty(), Value, "step.profile: capturing the step failed",
           step >= 0 ? " at instruction " + std::to_string(step) + " (" + op_name(exec_.instructions()[step]) + ")" : "", ": ", why);
  return ms;
}

void Capture::try_capture() {
  cuda::CaptureResult r = cuda::capture(exec_.device().index, device_rng_body());
  if (!r.graph) {
    phase_ = Phase::Off;
    std::string where;
    if (r.step >= 0)
      where = " at instruction " + std::to_string(r.step) + " (" + op_name(exec_.instructions()[r.step]) + ")";
    status_ = "fallback to plain execution: capture failed" + where + ": " + r.why;
    return;
  }
  graph_ = std::move(r.graph);
  phase_ = Phase::Replay;
  status_ = "captured: one CUDA graph of " + std::to_string(graph_->nodes()) +
            " nodes, replayed per call with cudaGraphLaunch";
}

}  // namespace fg::plan
