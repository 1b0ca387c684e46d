// A compile tracer is one trace mode of the thread that made it: it decides shape-only dispatch, is
// the graphs' ControlFlow and the modules' CallObserver there, and nowhere else. Tracers nested and
// stopped in any order leave the others as they were.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "flowgrad/ops/ops.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

bool shape_only(const Tensor& t) { return t.storage()->is_shape_only(); }
graph::ControlFlow* as_control_flow(Tracer* t) { return t; }
nn::CallObserver* as_observer(Tracer* t) { return t; }

TEST(Tracer, NestedTracersStoppedInEitherOrderLeaveTheOtherTracing) {
  Tensor a = ones({3}, DType::Float32, cpu_device());  // made before both: traced on shapes only
  for (bool outer_first : {false, true}) {
    auto outer = std::make_unique<Tracer>();
    auto inner = std::make_unique<Tracer>();
    EXPECT_EQ(graph::control_flow(), as_control_flow(inner.get()));
    EXPECT_EQ(nn::call_observer(), as_observer(inner.get()));
    (outer_first ? outer : inner)->stop();
    Tracer* left = outer_first ? inner.get() : outer.get();
    EXPECT_TRUE(shape_only(-a));
    EXPECT_EQ(graph::control_flow(), as_control_flow(left));
    EXPECT_EQ(nn::call_observer(), as_observer(left));
    left->stop();
    EXPECT_FALSE(shape_only(-a));
    EXPECT_EQ(graph::control_flow(), nullptr);
    EXPECT_EQ(nn::call_observer(), nullptr);
  }
}

TEST(Tracer, OpsOfAnotherThreadComputeAndAreNotTraced) {
  Tensor a = ones({3}, DType::Float32, cpu_device());
  Tracer tracer;
  Tensor other;
  graph::ControlFlow* other_control_flow = nullptr;
  std::thread([&] {
    other = -a;
    other_control_flow = graph::control_flow();
  }).join();
  EXPECT_FALSE(shape_only(other));
  EXPECT_EQ(other_control_flow, nullptr);
  EXPECT_TRUE(tracer.calls.empty());
  EXPECT_TRUE(shape_only(-a));
  EXPECT_EQ(tracer.calls.size(), 1u);
  tracer.stop();
}

}  // namespace
}  // namespace fg::plan
