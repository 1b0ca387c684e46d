// The execution context: Scoped<&ExecContext::field> sets a field for a scope and restores it,
// also when the scope is left by an exception; each thread starts from the defaults.
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "flowgrad/core/allocator.h"
#include "flowgrad/core/context.h"
#include "flowgrad/core/runtime.h"

namespace fg {
namespace {

TEST(ExecContext, ScopedRestoresEveryFieldOnException) {
  ExecContext before = context();
  KernelScratch scratch;
  uint64_t counter[2] = {1, 2};
  try {
    GradModeGuard no_grad(!before.grad_enabled);
    RngStream stream(RngState{7, 0});
    ScratchScope on_scratch(&scratch);
    CapturePhilox philox(counter);
    AutocastScope autocast({AutocastState{true, DType::Float16}, AutocastState{}});
    EXPECT_EQ(context().grad_enabled, !before.grad_enabled);
    EXPECT_EQ(rng_reserve(5), 0u);  // the private stream, not the global generator
    EXPECT_EQ(context().rng_stream->offset, 5u);
    EXPECT_EQ(context().scratch, &scratch);
    EXPECT_EQ(context().capture_philox, counter);
    EXPECT_TRUE(context().autocast[0].enabled);
    throw std::runtime_error("inside the scopes");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(context().grad_enabled, before.grad_enabled);
  EXPECT_EQ(context().rng_stream.has_value(), before.rng_stream.has_value());
  EXPECT_EQ(context().scratch, before.scratch);
  EXPECT_EQ(context().capture_philox, before.capture_philox);
  EXPECT_EQ(context().autocast[0].enabled, before.autocast[0].enabled);
}

TEST(ExecContext, NestedScopesRestoreInReverseOrder) {
  bool start = context().grad_enabled;
  {
    GradModeGuard off(false);
    {
      GradModeGuard on(true);
      EXPECT_TRUE(context().grad_enabled);
      EXPECT_FALSE(on.previous());
    }
    EXPECT_FALSE(context().grad_enabled);
  }
  EXPECT_EQ(context().grad_enabled, start);
}

TEST(ExecContext, AnInnerRngStreamLeavesTheOuterOneWhereItWas) {
  RngStream outer(RngState{3, 10});
  {
    RngStream inner(RngState{4, 0});
    EXPECT_EQ(rng_reserve(100), 0u);
  }
  EXPECT_EQ(rng_reserve(1), 10u);
  EXPECT_EQ(context().rng_stream->seed, 3u);
}

TEST(ExecContext, EachThreadStartsFromTheDefaults) {
  GradModeGuard off(false);
  ScratchScope on_scratch(nullptr);
  bool other_grad = false;
  bool other_stream = true;
  std::thread([&] {
    other_grad = context().grad_enabled;
    other_stream = context().rng_stream.has_value();
  }).join();
  EXPECT_TRUE(other_grad);
  EXPECT_FALSE(other_stream);
  EXPECT_FALSE(context().grad_enabled);
}

}  // namespace
}  // namespace fg
