// The execution context: everything that decides how an op runs on this thread, in one struct.
// Grad mode, the private RNG stream, the current CUDA stream per device, the autocast state,
// anomaly mode and the dispatch mode stacks (ops/dispatch.h) are fields here, and one template,
// Scoped<&ExecContext::field>, sets a field for a scope and restores it on exit (exceptions
// included). A thread flowgrad starts on behalf of a caller (a parallel graph level's pool task)
// runs under ContextGuard(the caller's context), as PyTorch's ThreadLocalStateGuard does.
//
// Process-wide on purpose, not here: the default float dtype and TF32 (configuration, as in
// PyTorch, read by code that has no caller context: plan lowering, kernels), the thread count
// and the BLAS threading (they size shared pools), the global generator (fg.manual_seed seeds
// every thread; ops draw from it unless rng_stream below is set).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "flowgrad/base/dtype.h"

namespace fg {

// A Philox generator's position: every random tensor draws `numel` counters starting at
// `offset`, so (seed, offset) decides its values on any device (core/runtime.h).
struct RngState {
  uint64_t seed;
  uint64_t offset;
};

// Autocast on one device type (fg.autocast): ops follow their table row's policy when enabled.
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::BFloat16;
};
constexpr int kMaxContextDevices = 64;  // CUDA devices with a current stream of their own

// The kinds of dispatch mode, in the order run_op walks them (ops/dispatch.h).
enum class ModeKind { Autocast, InPlaceCheck, Autograd, Trace };
constexpr int kModeKinds = 4;
class DispatchMode;
// The innermost mode of each kind (each links to the one it was pushed over), or null.
using ModeStacks = std::array<DispatchMode*, kModeKinds>;

// The modes every thread starts with: the resident autocast, in-place check and autograd modes,
// installed once at start-up (install_mode), before any op runs.
inline ModeStacks& resident_modes() {
  static ModeStacks modes{};
  return modes;
}

struct ExecContext {
  bool grad_enabled = true;  // autograd records ops (fg.no_grad turns it off)
  bool anomaly = false;      // fg.autograd.detect_anomaly: every op output and gradient is checked
  bool scanning = false;     // anomaly mode's own check runs (its ops are not checked)
  // A private Philox generator that random ops draw from instead of the global one (graph
  // branches, checkpoint replays): independent of scheduling, and discarded with its scope.
  std::optional<RngState> rng_stream;
  // The current stream of each CUDA device (a cudaStream_t; 0 is the legacy default stream).
  std::array<uintptr_t, kMaxContextDevices> streams{};
  std::array<AutocastState, 2> autocast{};  // indexed by DeviceType::CPU, DeviceType::CUDA
  ModeStacks modes = resident_modes();      // indexed by ModeKind; a trace mode is this thread's only
};

// This thread's context (a new thread starts from the defaults above).
inline ExecContext& context() {
  thread_local ExecContext c;
  return c;
}

// Sets one field of this thread's context for the scope, then restores the previous value:
//   Scoped<&ExecContext::grad_enabled> no_grad(false);
template <auto Field>
class Scoped {
 public:
  using Value = std::remove_reference_t<decltype(std::declval<ExecContext&>().*Field)>;
  explicit Scoped(Value value) : context_(context()), previous_(std::exchange(context_.*Field, std::move(value))) {}
  ~Scoped() { context_.*Field = std::move(previous_); }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;
  const Value& previous() const { return previous_; }

 private:
  ExecContext& context_;
  Value previous_;
};

// Runs the scope under another thread's whole context (a pool task under its caller's), then puts
// this thread's back.
class ContextGuard {
 public:
  explicit ContextGuard(const ExecContext& c) : previous_(std::exchange(context(), c)) {}
  ~ContextGuard() { context() = std::move(previous_); }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  ExecContext previous_;
};

// The scopes code takes by name.
using GradModeGuard = Scoped<&ExecContext::grad_enabled>;  // recording on or off
using RngStream = Scoped<&ExecContext::rng_stream>;        // random ops draw from a private stream
using AutocastScope = Scoped<&ExecContext::autocast>;      // AutocastScope off({}) suspends autocast
using AnomalyScan = Scoped<&ExecContext::scanning>;        // anomaly mode's check is running

}  // namespace fg
