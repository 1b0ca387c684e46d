// CUDA graph capture of a whole plan (capture.h). On the second call of a CUDA plan its
// instructions are captured on a capture stream into one graph; every later call launches the
// graph once the executable has copied the inputs into their slots (and written the random
// counters' pair, when the host's generator moved elsewhere: Executable::sync_rng).
// Hyper-parameters and step counters are device tensors the optimizer kernels read, so replays see
// scheduler changes; random calls read the pair, which the plan's last instruction advances inside
// the graph, so replays draw fresh, reproducible random values. The first captured step is checked
// against a plain one from the same state (capture_check.cpp).
#include "flowgrad/plan/capture.h"

#include <chrono>

#include "flowgrad/core/env.h"
#include "flowgrad/cuda/captured_graph.h"
#include "flowgrad/plan/executable.h"

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
  graph_->launch(cuda::current_stream_handle(exec_.device().index));
  ++replays_;
  return true;
}

std::function<void(const std::function<void(int)>&)> Capture::body() {
  return [this](const std::function<void(int)>& progress) { exec_.execute(&progress); };
}

std::vector<double> Capture::profile() {
  const int n = static_cast<int>(exec_.instructions().size());
  std::vector<double> ms(n, 0.0);
  if (exec_.device().is_cpu()) {
    using Clock = std::chrono::steady_clock;
    std::vector<Clock::time_point> at(n + 1);
    std::function<void(int)> mark = [&](int i) { at[i] = Clock::now(); };
    exec_.execute(&mark);
    at[n] = Clock::now();
    for (int i = 0; i < n; ++i) ms[i] = std::chrono::duration<double, std::milli>(at[i + 1] - at[i]).count();
    return ms;
  }
  if (phase_ == Phase::WarmUp || phase_ == Phase::Off) {
    // This call's step is the plain run a call would make (review G8: capturing before the warm-up
    // run found the scratch unsized); events between its instructions time it.
    ms = cuda::time_plain(exec_.device().index, n, body());
    if (phase_ == Phase::WarmUp) phase_ = Phase::Capture;
    return ms;
  }
  std::string why;
  int step = -1;
  ms = cuda::time_steps(exec_.device().index, n, body(), &why, &step);  // draws and advances like a replay
  FG_CHECK(why.empty(), Value, "step.profile: capturing the step failed",
           step >= 0 ? " at instruction " + std::to_string(step) + " (" + op_name(exec_.instructions()[step]) + ")" : "", ": ", why);
  return ms;
}

void Capture::try_capture() {
  cuda::CaptureResult r = cuda::capture(exec_.device().index, body());
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
