// The Executable (plan/executable.h) lowered straight from a hand-built Program and its memory
// plan: no trace and no Plan. A switch whose block holds a fused elementwise run executes the
// block the selector picks, tile by tile, and counts the blocks it took; a result written over
// its dying operand computes what it would in bytes of its own.
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

// g = x * 3 dies at mul_colsum(g, x), which writes g * x over it (in_place_pairs); read again
// later (second program), g keeps its bytes. Either way the step computes g * x and its column sums.
TEST(Executable, AnActivationBackwardWritesOverTheGradientThatDiesThere) {
  const Dims shape{37, 70};
  for (bool read_later : {false, true}) {
    Program p;
    p.device = cpu_device();
    Value x = whole_value(p, BufferKind::Input, "x0", shape), three = whole_value(p, BufferKind::Input, "three", Dims{});
    p.inputs = {x, three};
    Value g = whole_value(p, BufferKind::Arena, "%g", shape), dx = whole_value(p, BufferKind::Arena, "%dx", shape);
    Value db = whole_value(p, BufferKind::Arena, "%db", Dims{70}), out = whole_value(p, BufferKind::Arena, "out", shape);
    Value late = whole_value(p, BufferKind::Arena, "late", shape);
    p.body.push_back(call(OpId::mul, {x, three}, g));
    p.body.push_back({&op_def(OpId::mul_colsum), {}, {g, x}, {dx, db}});
    p.body.push_back(call(OpId::neg, {dx}, out));
    p.outputs = {out, db};
    if (read_later) {
      p.body.push_back(call(OpId::neg, {g}, late));
      p.outputs.push_back(late);
    }
    const MemoryPlan memory = plan_memory(p, def_use(p));
    check_memory(p, memory);
    EXPECT_EQ(memory.takes[dx.buffer], read_later ? -1 : g.buffer);
    if (!read_later) {
      EXPECT_EQ(memory.offset[dx.buffer], memory.offset[g.buffer]);
    }
    for (bool poison : {false, true}) {  // a taken buffer is never poisoned under its taker
      Binding binding;
      binding.poison = poison;
      Executable exe(p, memory, binding);
      Tensor xs = Tensor::empty(shape, DType::Float32, cpu_device()), k = Tensor::empty(Dims{}, DType::Float32, cpu_device());
      for (int64_t i = 0; i < shape.numel(); ++i) xs.data<float>()[i] = static_cast<float>(i % 13) - 6.0f;
      k.data<float>()[0] = 3.0f;
      Tensors got = exe.run({xs, k});
      for (int64_t j = 0; j < 70; ++j) {
        double sum = 0;
        for (int64_t i = 0; i < 37; ++i) {
          const float v = xs.data<float>()[i * 70 + j];
          ASSERT_EQ(got[0].data<float>()[i * 70 + j], -((v * 3.0f) * v));
          sum += (v * 3.0f) * v;
        }
        ASSERT_NEAR(got[1].data<float>()[j], sum, 1e-3);
      }
    }
  }
}

}  // namespace
}  // namespace fg::plan
