// The Executable (plan/executable.h) lowered straight from a hand-built Program and its memory
// plan: no trace and no Plan. A switch whose block holds a fused elementwise run executes the
// block the selector picks, tile by tile, and counts the blocks it took.
#include <gtest/gtest.h>

#include <cmath>

#include "flowgrad/plan/executable.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

Value whole_value(Program& p, BufferKind kind, const std::string& name, const Dims& shape) {
  int id = p.add_buffer({kind, name, static_cast<size_t>(shape.numel()) * 4, cpu_device(), DType::Float32});
  return {id, 0, shape, contiguous_strides(shape), DType::Float32};
}

Instr call(OpId op, std::vector<Value> in, Value out) { return {&op_def(op), {}, std::move(in), {std::move(out)}}; }

TEST(Executable, RunsTheSwitchBlockTheSelectorPicksWithItsFusedRun) {
  const Dims shape{64, 256};  // 16384 elements: the CPU fuses the chain
  Program p;
  p.device = cpu_device();
  Value x = whole_value(p, BufferKind::Input, "x0", shape);
  Value sel = whole_value(p, BufferKind::Input, "sel", Dims{1});
  p.inputs = {x, sel};
  Value out = whole_value(p, BufferKind::Arena, "out", shape);
  Value e = whole_value(p, BufferKind::Arena, "%e", shape), r = whole_value(p, BufferKind::Arena, "%r", shape);
  Block chain{call(OpId::exp, {x}, e), call(OpId::relu, {e}, r), call(OpId::neg, {r}, out)};
  Block copy{call(OpId::neg, {x}, out)};
  Instr branch{nullptr, {}, {}, {}, Phase::Forward, -1, InstrKind::Switch};
  branch.region.id = p.regions++;
  branch.region.selector = sel;
  branch.region.owned = {out.buffer};
  branch.blocks = {chain, copy};
  p.body.push_back(branch);
  p.outputs = {out};
  p = fuse_elementwise(std::move(p));
  ASSERT_EQ(p.body[0].blocks[0][0].kind, InstrKind::Fused);

  const MemoryPlan memory = plan_memory(p, def_use(p));
  check_memory(p, memory);
  Executable exe(p, memory, Binding{});
  ASSERT_EQ(exe.runs().size(), 1u);
  EXPECT_NE(exe.runs()[0].code, &exe.instructions());  // the run lives in the switch's block

  Tensor xs = Tensor::empty(shape, DType::Float32, cpu_device());
  for (int64_t i = 0; i < shape.numel(); ++i) xs.data<float>()[i] = static_cast<float>(i % 97) / 40.0f - 1.0f;
  Tensor pick = Tensor::empty(Dims{1}, DType::Float32, cpu_device());
  for (float which : {0.0f, 1.0f, 0.0f}) {
    pick.data<float>()[0] = which;
    Tensor y = exe.run({xs, pick})[0];
    for (int64_t i = 0; i < shape.numel(); i += 331) {
      const float v = xs.data<float>()[i];
      const float want = which == 0.0f ? -std::max(std::exp(v), 0.0f) : -v;
      ASSERT_NEAR(y.data<float>()[i], want, 1e-6 * std::max(1.0f, std::fabs(want))) << "element " << i << " with block " << which;
    }
  }
  EXPECT_EQ(exe.instructions()[0].branch->runs, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(exe.run_stats().allocations, 0u);  // a warm executable allocates nothing
}

}  // namespace
}  // namespace fg::plan
