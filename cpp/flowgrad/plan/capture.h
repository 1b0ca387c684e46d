// Whole-step CUDA graph capture of a plan's executable: a small state machine (warm up, capture,
// replay) that falls back to plain execution for good when capture fails, and says why in
// status() (stats()["cuda_graph"]). Kept apart from the executor loop (executable.cpp) on purpose:
// it drives the Executable through its public interface only.
#pragma once
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "flowgrad/core/device.h"

namespace fg::cuda {
class CapturedGraph;
}

namespace fg::plan {

class Executable;

// Why a plan on `device` will not be captured, decided on the host before any attempt ("" when
// it will be tried): a CPU plan, the FLOWGRAD_NO_CUDA_GRAPH kill switch, a branch instruction
// (switch / while_ / until decide on the host until they become CUDA conditional nodes), an
// instruction whose op needs the host. CPU tests ask it about "cuda" to exercise the rules.
std::string capture_blocker(const Executable& exec, Device device);

class Capture {
 public:
  explicit Capture(Executable& exec);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  // Runs the step whose inputs are already in their slots, as a replay of the captured graph
  // (capturing it first on the second call); false when the caller must run the plan plainly
  // (CPU, kill switch, the warm-up call, a failed capture).
  bool try_replay();
  // Runs the step once and returns each instruction's milliseconds: on the CPU by the host clock
  // around each instruction (a fused run counts at its first instruction), on CUDA from timing
  // events recorded inside a captured graph of the step once there is one, else (the warm-up call,
  // the kill switch, a failed capture) around the plain run that call makes.
  std::vector<double> profile();
  // The capture self-check: runs `step` and the plan's plain step from the same state (every
  // buffer the step writes that outlives it, and the host generator), then compares what each
  // left (those buffers, the random counters' pair among them, and the outputs): bitwise, or, when
  // the plan adds floats with atomics (order-dependent sums), within kCheckTolerance of each buffer's
  // largest magnitude or kNoiseMargin times what a second plain step differs by there. Returns ""
  // when they agree (`step`'s result stays: one step applied), else the first buffer that
  // differs and the instruction that wrote it, with the state from before both restored.
  std::string check_against_plain(const std::function<void()>& step);
  static constexpr double kCheckTolerance = 1e-4;
  static constexpr double kNoiseMargin = 4.0;
  const std::string& status() const { return status_; }
  int replays() const { return replays_; }

 private:
  enum class Phase { Off, WarmUp, Capture, Replay };
  void try_capture();
  // The first captured step against a plain one (FLOWGRAD_CAPTURE_CHECK); true when its replay
  // was this call's step (they agreed), false after a mismatch (phase Off) or when the snapshots
  // did not fit in memory (nothing ran: the check is skipped and the graph kept).
  bool self_check();
  // The capture body: the executable's instructions, reporting each one's start.
  std::function<void(const std::function<void(int)>&)> body();

  Executable& exec_;
  Phase phase_ = Phase::Off;
  std::string status_;
  std::unique_ptr<cuda::CapturedGraph> graph_;
  int replays_ = 0;
};

}  // namespace fg::plan
