// Random state as a tensor. Every random op reads its Philox {seed, base} pair as an input (a
// 2-element int64 tensor) and draws `offset` counters past base: an eager call passes a host pair
// the generator reserved, a compiled plan its "philox" buffer or a pair derived from it. Derived
// streams (the branches of a parallel graph level, a switch's branches, a loop's iterations) are
// pairs too, so a plan computes them with philox_derive where eager code derives them on the host.
#pragma once
#include <cstdint>

#include "flowgrad/core/context.h"
#include "flowgrad/ops/registry.h"

namespace fg {

// The key spaces of derived streams (a level's branches take their node id as key).
constexpr uint64_t kSwitchStreams = uint64_t{1} << 62;  // + the branch index
constexpr uint64_t kLoopStreams = uint64_t{2} << 62;    // + the iteration of the body
constexpr uint64_t kHaltStreams = uint64_t{3} << 62;    // + the iteration of the halt

// What a random op reads: its pair input and the counters past the pair's base it starts at.
struct RngDraw {
  Tensor pair;
  int64_t offset = 0;
};

// A trace mode that stands tensors in for this thread's generator state (fg.compile's tracer).
class RngSource {
 public:
  virtual ~RngSource() = default;
  // The pair that holds stream `at` when the plan runs, and how far `at` lies past its base.
  virtual RngDraw pair_at(RngState at, Device device) = 0;
  // `derived` is the stream derive_stream made from `base` and `key` (plus `index`'s value).
  virtual void on_derived(RngState base, uint64_t key, const Tensor& index, RngState derived) = 0;
};

// Reserves `counters` counters of this thread's stream (core/runtime.h) and returns the pair a
// random op on `device` reads: a host pair eagerly, a tracer's pair while tracing.
RngDraw rng_draw(uint64_t counters, Device device);

// The stream derived from `base` with `key`: {derived_seed(base, key), 0} (kernels/creation).
// While tracing, `index` (a loop's iteration, an int64 scalar the plan writes) is added to the key
// when the plan runs; eager code adds the iteration to `key` itself.
RngState derive_stream(RngState base, uint64_t key, const Tensor& index = {});

// Takes one counter of this thread's stream for a construct that derives streams from its state (a
// parallel level, a switch, a while_/until loop) and returns the state before, so no two constructs
// derive the same streams.
RngState rng_fork();

}  // namespace fg
