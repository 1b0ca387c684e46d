// The execution context: everything that decides how an op runs on this thread, in one struct.
// Grad mode, the private RNG stream, the current CUDA stream per device and the autocast state
// each used to be a thread-local of its own folder with a guard class of its own; now each is a
// field here, and one template, Scoped<&ExecContext::field>, sets a field for a scope and
// restores it on exit (exceptions included). The per-op interceptors (autocast, in-place check, autograd, trace) are the mode
// stack of ops/dispatch.h.
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

struct ExecContext {
  bool grad_enabled = true;  // autograd records ops (fg.no_grad turns it off)
  // A private Philox generator that random ops draw from instead of the global one (graph
  // branches, checkpoint replays): independent of scheduling, and discarded with its scope.
  std::optional<RngState> rng_stream;
  // The current stream of each CUDA device (a cudaStream_t; 0 is the legacy default stream).
  std::array<uintptr_t, kMaxContextDevices> streams{};
  std::array<AutocastState, 2> autocast{};  // indexed by DeviceType::CPU, DeviceType::CUDA
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

// The scopes code takes by name.
using GradModeGuard = Scoped<&ExecContext::grad_enabled>;  // recording on or off
using RngStream = Scoped<&ExecContext::rng_stream>;        // random ops draw from a private stream
using AutocastScope = Scoped<&ExecContext::autocast>;      // AutocastScope off({}) suspends autocast

}  // namespace fg
