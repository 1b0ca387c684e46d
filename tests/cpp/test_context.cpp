// The execution context and the dispatch mode stack. Scoped<&ExecContext::field> sets a field for a scope and restores it,
// also when the scope is left by an exception; each thread starts from the defaults.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "flowgrad/core/allocator.h"
#include "flowgrad/core/context.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/registry.h"

namespace fg {
namespace {

TEST(ExecContext, ScopedRestoresEveryFieldOnException) {
  ExecContext before = context();
  try {
    GradModeGuard no_grad(!before.grad_enabled);
    RngStream stream(RngState{7, 0});
    AutocastScope autocast({AutocastState{true, DType::Float16}, AutocastState{}});
    EXPECT_EQ(context().grad_enabled, !before.grad_enabled);
    EXPECT_EQ(rng_reserve(5), 0u);  // the private stream, not the global generator
    EXPECT_EQ(context().rng_stream->offset, 5u);
    EXPECT_TRUE(context().autocast[0].enabled);
    throw std::runtime_error("inside the scopes");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(context().grad_enabled, before.grad_enabled);
  EXPECT_EQ(context().rng_stream.has_value(), before.rng_stream.has_value());
  EXPECT_EQ(context().autocast[0].enabled, before.autocast[0].enabled);
}

// run_op hands kernels a KernelEnv filled from this context (kernels read no thread-local).
TEST(KernelEnv, CurrentEnvIsFilledFromTheContext) {
  KernelEnv plain = current_env(cpu_device());
  EXPECT_EQ(plain.stream, 0u);
  EXPECT_EQ(plain.scratch, nullptr);  // eager kernels take temporaries from the allocator
  const bool tf32 = allow_tf32();
  {
    set_allow_tf32(!tf32);
    KernelEnv env = current_env(cpu_device());
    set_allow_tf32(tf32);
    EXPECT_EQ(env.tf32, !tf32);
    EXPECT_EQ(env.stream, 0u);  // the CPU has no stream
  }
  EXPECT_EQ(current_env(cpu_device()).tf32, tf32);
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

// Kernel temporaries come from the scratch block of their KernelEnv (a compiled plan's), never from
// a thread-local: with room they take the block's bytes and allocate nothing; without room (or
// without a block) they come from the allocator, and the block records how much it should hold.
TEST(KernelScratch, TemporariesComeFromTheEnvsBlock) {
  alignas(64) static char block[256];
  KernelScratch scratch{block, sizeof block, 0, 0, cpu_device()};
  KernelEnv env;
  env.scratch = &scratch;
  uint64_t before = storage_allocations();
  Tensor a = Tensor::temporary(env, Dims{3}, DType::Float32, cpu_device());
  Tensor b = Tensor::temporary(env, Dims{5}, DType::Float64, cpu_device());
  EXPECT_EQ(storage_allocations(), before);
  EXPECT_EQ(a.data_ptr(), static_cast<void*>(block));
  EXPECT_EQ(b.data_ptr(), static_cast<void*>(block + 64));  // 64-byte aligned
  Tensor c = Tensor::temporary(env, Dims{64}, DType::Float32, cpu_device());  // 256 bytes: no room left
  EXPECT_EQ(storage_allocations(), before + 1);
  EXPECT_EQ(scratch.peak, 128u + 256u);
  scratch.used = 0;  // the plan resets it before each instruction
  EXPECT_EQ(Tensor::temporary(env, Dims{1}, DType::Int64, cpu_device()).data_ptr(), static_cast<void*>(block));
  Tensor plain = Tensor::temporary(KernelEnv{}, Dims{2}, DType::Float32, cpu_device());
  EXPECT_EQ(storage_allocations(), before + 2);
  (void)c, (void)plain;
}

}  // namespace
}  // namespace fg

// The dispatch mode stack (ops/dispatch.h): a trace mode pushed by a ModeGuard sees every op
// run_op runs and every host read, the innermost first, and nothing once its guard is gone.
namespace fg {
namespace {

struct Recorder final : OpObserver {
  std::vector<std::string>* log;
  std::string tag;
  Recorder(std::vector<std::string>* log, std::string tag) : log(log), tag(std::move(tag)) {}
  void on_op(const OpDef& op, TensorList, const Tensors&, const Attrs&) override { log->push_back(tag + op.name); }
  void on_host_read(const Tensor&, const char* what) override { log->push_back(tag + what); }
};

TEST(ModeStack, TraceModesSeeOpsInnermostFirstWhileTheirGuardsLive) {
  std::vector<std::string> log;
  Recorder outer(&log, "outer:"), inner(&log, "inner:");
  Tensor a = Tensor::empty({2}, DType::Float32, cpu_device());
  {
    ModeGuard on_outer(&outer);
    {
      std::optional<ModeGuard> on_inner(std::in_place, &inner);
      run_op(op_def(OpId::neg), {a});
      notify_host_read(a, "item");
      on_inner.reset();
    }
    run_op(op_def(OpId::neg), {a});
  }
  run_op(op_def(OpId::neg), {a});
  std::vector<std::string> expected{"inner:neg", "outer:neg", "inner:item", "outer:item", "outer:neg"};
  EXPECT_EQ(log, expected);
}

TEST(ModeStack, GuardsMayEndOutOfOrder) {
  std::vector<std::string> log;
  Recorder first(&log, "first:"), second(&log, "second:");
  Tensor a = Tensor::empty({1}, DType::Float32, cpu_device());
  auto on_first = std::make_unique<ModeGuard>(&first);
  ModeGuard on_second(&second);
  on_first.reset();  // the lower guard ends first (a tracer stopped early)
  run_op(op_def(OpId::neg), {a});
  EXPECT_EQ(log, std::vector<std::string>{"second:neg"});
}

TEST(ModeStack, ResidentKindsCannotTakeATraceMode) {
  Recorder r(nullptr, "");
  EXPECT_THROW(install_mode(ModeKind::Trace, &r), std::exception);
}

// The trace stack is per thread: an op of another thread neither reaches a trace mode nor follows
// its dispatch, unless that thread runs under a ContextGuard of this thread's context.
TEST(ModeStack, ATraceModeSeesOnlyItsOwnThreadAndThreadsUnderItsContext) {
  std::vector<std::string> log;
  Recorder mine(&log, "");
  Tensor a = Tensor::empty({1}, DType::Float32, cpu_device());
  ModeGuard on(&mine);
  std::thread([&] { run_op(op_def(OpId::exp), {a}); }).join();
  EXPECT_TRUE(log.empty());
  const ExecContext caller = context();
  std::thread([&] {
    {
      ContextGuard inherit(caller);
      run_op(op_def(OpId::neg), {a});
    }
    run_op(op_def(OpId::exp), {a});  // the guard gave the thread its own context back
  }).join();
  EXPECT_EQ(log, std::vector<std::string>{"neg"});
}

TEST(ExecContext, ContextGuardInstallsEveryFieldAndRestoresThem) {
  ExecContext other = context();
  other.grad_enabled = !other.grad_enabled;
  other.anomaly = true;
  other.rng_stream = RngState{9, 4};
  other.autocast[0] = AutocastState{true, DType::Float16};
  other.streams[1] = 42;
  ExecContext before = context();
  {
    ContextGuard guard(other);
    EXPECT_EQ(context().grad_enabled, other.grad_enabled);
    EXPECT_TRUE(context().anomaly);
    EXPECT_EQ(rng_reserve(3), 4u);
    EXPECT_TRUE(context().autocast[0].enabled);
    EXPECT_EQ(context().streams[1], 42u);
  }
  EXPECT_EQ(context().grad_enabled, before.grad_enabled);
  EXPECT_EQ(context().anomaly, before.anomaly);
  EXPECT_EQ(context().rng_stream.has_value(), before.rng_stream.has_value());
  EXPECT_EQ(context().autocast[0].enabled, before.autocast[0].enabled);
  EXPECT_EQ(context().streams[1], before.streams[1]);
  EXPECT_EQ(context().modes, before.modes);
}

}  // namespace
}  // namespace fg
