// Plan passes as functions Program -> Program (plan/passes/passes.h), the def/use analysis and
// the memory plan with its checker, on hand-built programs: no trace, no kernels, no memory.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>

#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/memory.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

// A program over float32 buffers of one shape: x0 is the input, `arena(n)` makes intermediates.
struct Builder {
  Program p;
  Dims shape;

  explicit Builder(Dims s) : shape(std::move(s)) {
    p.device = cpu_device();
    p.inputs.push_back(value(buffer(BufferKind::Input, "x0")));
  }
  int buffer(BufferKind kind, const std::string& name, Dims of = {}) {
    const Dims& dims = of.size() ? of : shape;
    return p.add_buffer({kind, name, static_cast<size_t>(dims.numel()) * 4, cpu_device(), DType::Float32});
  }
  Value value(int id, Dims of = {}) const {
    const Dims& dims = of.size() ? of : shape;
    return {id, 0, dims, contiguous_strides(dims), DType::Float32};
  }
  Value x() const { return p.inputs[0]; }
  Value fresh() { return value(buffer(BufferKind::Arena, "%" + std::to_string(p.buffers.size()))); }
  Instr call(OpId op, std::vector<Value> in, Value out) { return {&op_def(op), {}, std::move(in), {std::move(out)}}; }
  // Appends op(in...) into a new buffer and returns it.
  Value emit(Block& code, OpId op, std::vector<Value> in) {
    Value out = fresh();
    code.push_back(call(op, std::move(in), out));
    return out;
  }
  Value emit(OpId op, std::vector<Value> in) { return emit(p.body, op, std::move(in)); }
  // A switch over `selector` with the given blocks, owning `owned`.
  Instr region(InstrKind kind, Value selector, std::vector<Block> blocks, std::vector<int> owned) {
    Instr r{nullptr, {}, {}, {}, Phase::Forward, -1, kind};
    r.region.id = p.regions++;
    r.region.label = "test region";
    r.region.selector = selector;
    r.region.owned = std::move(owned);
    r.blocks = std::move(blocks);
    return r;
  }
};

std::vector<OpId> ops(const Block& code) {
  std::vector<OpId> out;
  for (const Instr& ins : code) out.push_back(ins.kind == InstrKind::Call ? ins.op->id : OpId::None);
  return out;
}

TEST(Cse, MergesARepeatedPureCallAndRenamesItsReaders) {
  Builder b(Dims{3, 5});
  Value e1 = b.emit(OpId::exp, {b.x()});
  Value e2 = b.emit(OpId::exp, {b.x()});
  b.p.outputs.push_back(b.emit(OpId::add, {e1, e2}));
  Program p = cse(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::exp, OpId::add}));
  EXPECT_EQ(p.body[1].in[0].buffer, e1.buffer);
  EXPECT_EQ(p.body[1].in[1].buffer, e1.buffer);
}

TEST(Cse, NeverMergesAcrossAWriteOfAnInput) {
  Builder b(Dims{4});
  Value e1 = b.emit(OpId::exp, {b.x()});
  b.p.body.push_back({&op_def(OpId::fill_), Attrs{{"value", 1.0}}, {b.x()}, {b.x()}});
  Value e2 = b.emit(OpId::exp, {b.x()});
  b.p.outputs = {b.emit(OpId::add, {e1, e2})};
  EXPECT_EQ(cse(b.p).body.size(), 4u);
}

TEST(Cse, MergesInsideABlockAndKeepsBlockValuesInside) {
  Builder b(Dims{4});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  Value outer = b.emit(OpId::exp, {b.x()});
  int owned = b.buffer(BufferKind::Arena, "owned");
  Block inner;
  Value i1 = b.emit(inner, OpId::exp, {b.x()});  // the same as `outer`: reused
  Value i2 = b.emit(inner, OpId::relu, {b.x()});
  Value i3 = b.emit(inner, OpId::relu, {b.x()});  // the same as i2: reused
  inner.push_back(b.call(OpId::add, {i1, i3}, b.value(owned)));
  b.p.body.push_back(b.region(InstrKind::Switch, selector, {inner, {}}, {owned}));
  Value after = b.emit(OpId::relu, {b.x()});  // made in a block: not reused outside
  b.p.outputs = {b.emit(OpId::add, {outer, b.value(owned)}), after};
  Program p = cse(b.p);
  ASSERT_EQ(p.body.size(), 4u);
  const Block& block = p.body[1].blocks[0];
  ASSERT_EQ(ops(block), (std::vector<OpId>{OpId::relu, OpId::add}));
  EXPECT_EQ(block[1].in[0].buffer, outer.buffer);
  EXPECT_EQ(block[1].in[1].buffer, i2.buffer);
  EXPECT_EQ(p.body[2].op->id, OpId::relu);
}

TEST(WrittenInputs, AMultiTensorUpdateWritesEveryGroupsParameterPastInput32) {
  Builder b(Dims{4});
  std::vector<Value> in{b.value(b.buffer(BufferKind::External, "hyper"))};
  std::vector<int> params;
  for (int g = 0; g < 40; ++g) {  // 81 inputs: hyper, then (param, grad) per group
    params.push_back(b.buffer(BufferKind::External, "w" + std::to_string(g)));
    in.push_back(b.value(params.back()));
    in.push_back(b.fresh());
  }
  std::vector<int> written;
  writes_deep(Instr{&op_def(OpId::sgd_update_multi), {}, in, {}}, [&](const Value& v) { written.push_back(v.buffer); });
  EXPECT_EQ(written, params);
  EXPECT_TRUE(mutates_inputs(op_def(OpId::sgd_update_multi)));
  EXPECT_FALSE(writes_input(op_def(OpId::sgd_update_multi), 80));  // the last group's gradient
  EXPECT_TRUE(writes_input(op_def(OpId::copy_), 0));                // in-place ops write input 0
  EXPECT_FALSE(writes_input(op_def(OpId::copy_), 1));
}

TEST(Dce, DropsADeadChainAndKeepsWritesOutsideThePlan) {
  Builder b(Dims{4});
  Value dead = b.emit(OpId::exp, {b.x()});
  b.emit(OpId::relu, {dead});
  Value param = b.value(b.buffer(BufferKind::External, "w"));
  b.p.body.push_back(b.call(OpId::exp, {b.x()}, param));
  b.p.outputs = {b.emit(OpId::neg, {b.x()})};
  Program p = dce(b.p);
  EXPECT_EQ(ops(p.body), (std::vector<OpId>{OpId::exp, OpId::neg}));
  EXPECT_EQ(p.body[0].out[0].buffer, param.buffer);
}

TEST(Dce, RemovesDeadCallsInsideABranchBlockAndEmptyRegions) {
  Builder b(Dims{4});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  int owned = b.buffer(BufferKind::Arena, "owned");
  Block live;
  b.emit(live, OpId::exp, {b.x()});  // read by nobody
  Value kept = b.emit(live, OpId::relu, {b.x()});
  live.push_back(b.call(OpId::contiguous, {kept}, b.value(owned)));
  Block dead;
  b.emit(dead, OpId::neg, {b.x()});
  b.p.body.push_back(b.region(InstrKind::Switch, selector, {live, {}}, {owned}));
  b.p.body.push_back(b.region(InstrKind::Switch, selector, {dead}, {}));
  b.p.outputs = {b.value(owned)};
  Program p = dce(b.p);
  ASSERT_EQ(p.body.size(), 1u);
  EXPECT_EQ(ops(p.body[0].blocks[0]), (std::vector<OpId>{OpId::relu, OpId::contiguous}));
}

TEST(FoldConstants, FoldsCallsComputedFromConstantsOnly) {
  Builder b(Dims{4});
  Value c = b.emit(OpId::arange, {});
  Value e = b.emit(OpId::exp, {c});
  b.p.outputs = {b.emit(OpId::add, {b.x(), e})};
  Program p = fold_constants(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::add}));
  for (const Value& v : {c, e}) {
    EXPECT_TRUE(p.buffers[v.buffer].constant);
    EXPECT_EQ(p.buffers[v.buffer].kind, BufferKind::External);
  }
  EXPECT_FALSE(p.buffers[p.outputs[0].buffer].constant);
}

TEST(FuseElementwise, FormsOneFusedInstructionWhoseBlockIsTheChain) {
  Builder b(Dims{64, 256});
  Value bias = b.value(b.buffer(BufferKind::External, "bias", Dims{256}), Dims{256});
  Value e = b.emit(OpId::exp, {b.x()});
  Value r = b.emit(OpId::relu, {e});
  Value s = b.emit(OpId::add, {r, bias});  // broadcast over the rows: joins the run
  b.p.outputs = {b.emit(OpId::matmul, {s, b.x()})};
  Program p = fuse_elementwise(b.p);
  ASSERT_EQ(p.body.size(), 2u);
  EXPECT_EQ(p.body[0].kind, InstrKind::Fused);
  EXPECT_EQ(p.body[0].split, 1);
  EXPECT_EQ(ops(p.body[0].blocks[0]), (std::vector<OpId>{OpId::exp, OpId::relu, OpId::add}));
  EXPECT_EQ(p.body[1].op->id, OpId::matmul);
}

TEST(FuseElementwise, LeavesShortCpuBuffersAlone) {
  Builder b(Dims{3, 5});
  Value e = b.emit(OpId::exp, {b.x()});
  b.p.outputs = {b.emit(OpId::relu, {e})};
  EXPECT_EQ(fuse_elementwise(b.p).body.size(), 2u);
}

TEST(FoldConstants, FoldsInsideABlockButNeverARegionsResult) {
  Builder b(Dims{4});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  int owned = b.buffer(BufferKind::Arena, "owned"), copied = b.buffer(BufferKind::Arena, "copied");
  Block inner;
  Value c = b.emit(inner, OpId::arange, {});
  Value e = b.emit(inner, OpId::exp, {c});  // computed from a constant: folded too
  inner.push_back(b.call(OpId::add, {b.x(), e}, b.value(owned)));
  inner.push_back(b.call(OpId::contiguous, {e}, b.value(copied)));  // a result: kept
  b.p.body.push_back(b.region(InstrKind::Switch, selector, {inner, {}}, {owned, copied}));
  b.p.outputs = {b.value(owned), b.value(copied)};
  Program p = fold_constants(b.p);
  ASSERT_EQ(p.body.size(), 1u);
  EXPECT_EQ(ops(p.body[0].blocks[0]), (std::vector<OpId>{OpId::add, OpId::contiguous}));
  EXPECT_TRUE(p.buffers[c.buffer].constant && p.buffers[e.buffer].constant);
  EXPECT_FALSE(p.buffers[copied].constant);
  EXPECT_EQ(p.buffers[copied].kind, BufferKind::Arena);
}

TEST(FuseElementwise, FusesAChainInsideABranchBlock) {
  Builder b(Dims{64, 256});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  int owned = b.buffer(BufferKind::Arena, "owned");
  Block inner;
  Value e = b.emit(inner, OpId::exp, {b.x()});
  Value r = b.emit(inner, OpId::relu, {e});
  inner.push_back(b.call(OpId::neg, {r}, b.value(owned)));
  b.p.body.push_back(b.region(InstrKind::Switch, selector, {inner, {}}, {owned}));
  b.p.outputs = {b.value(owned)};
  Program p = fuse_elementwise(b.p);
  ASSERT_EQ(p.body.size(), 1u);
  const Block& block = p.body[0].blocks[0];
  ASSERT_EQ(block.size(), 1u);
  EXPECT_EQ(block[0].kind, InstrKind::Fused);
  EXPECT_EQ(ops(block[0].blocks[0]), (std::vector<OpId>{OpId::exp, OpId::relu, OpId::neg}));
  EXPECT_EQ(count_kernels(p.body), 2);  // the region and its fused run
  EXPECT_EQ(count_calls(p.body), 4);    // the region and the run's three calls
  std::vector<bool> local = fused_locals(p, def_use(p));
  EXPECT_TRUE(local[e.buffer] && local[r.buffer]);
  EXPECT_FALSE(local[owned]);  // read after the region
}

TEST(BindGrads, ForwardsAWholeGradientAndCopiesAView) {
  Builder b(Dims{4, 3});
  Value whole = b.emit(OpId::exp, {b.x()});
  Value wide = b.fresh();
  b.p.body.push_back(b.call(OpId::relu, {b.x()}, wide));
  Value row{wide.buffer, 3, Dims{3}, Dims{1}, DType::Float32};  // a view: row 1 of `wide`
  b.p.grads = {{whole, Dims{4, 3}, DType::Float32, "w"}, {row, Dims{3}, DType::Float32, "bias"}};
  Program p = bind_grads(b.p);
  EXPECT_EQ(p.grads[0].target, whole.buffer);  // the producing call writes .grad directly
  EXPECT_EQ(p.buffers[whole.buffer].kind, BufferKind::External);
  EXPECT_EQ(p.buffers[whole.buffer].name, "grad(w)");
  const int copy = p.grads[1].target;
  ASSERT_EQ(copy, static_cast<int>(b.p.buffers.size()));  // a new buffer, written by one copy at the end
  EXPECT_EQ(p.buffers[copy].bytes, 12u);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::exp, OpId::relu, OpId::contiguous}));
  EXPECT_EQ(p.body[2].in[0].offset, 3);
  EXPECT_EQ(p.body[2].out[0].buffer, copy);
}

TEST(BindGrads, AGradientOfAnotherDtypeRaises) {
  Builder b(Dims{4});
  Value g = b.value(b.buffer(BufferKind::Arena, "g"), Dims{2});
  b.p.grads = {{g, Dims{2}, DType::Float64, "w"}};
  try {
    bind_grads(b.p);
    FAIL() << "bind_grads accepted a float32 gradient of a float64 parameter";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::DType);
    EXPECT_NE(std::string(e.what()).find("the gradient of w is float32, the parameter float64"), std::string::npos);
  }
}

TEST(FoldTransposes, AMatmulCopiedOutTransposedComputesTheTransposedProduct) {
  Builder b(Dims{4, 6});
  Value w = b.value(b.buffer(BufferKind::External, "w", Dims{6, 5}), Dims{6, 5});
  Value r = b.value(b.buffer(BufferKind::Arena, "r", Dims{4, 5}), Dims{4, 5});
  b.p.body.push_back(b.call(OpId::matmul, {b.x(), w}, r));
  Value out = b.value(b.buffer(BufferKind::Arena, "t", Dims{5, 4}), Dims{5, 4});
  b.p.body.push_back(b.call(OpId::contiguous, {{r.buffer, 0, Dims{5, 4}, Dims{1, 5}, DType::Float32}}, out));
  b.p.outputs = {out};
  Program p = fold_transposes(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::matmul}));
  EXPECT_EQ(p.body[0].out[0].buffer, out.buffer);
  EXPECT_EQ(p.body[0].in[0].buffer, w.buffer);  // (x w)^T = w^T x^T
  EXPECT_EQ(p.body[0].in[0].shape, (Dims{5, 6}));
  EXPECT_EQ(p.body[0].in[0].strides, (Dims{1, 5}));
  EXPECT_EQ(p.body[0].in[1].buffer, b.x().buffer);
}

TEST(FoldTransposes, FoldsInsideALoopBodyButNotAcrossBlocks) {
  Builder b(Dims{4, 6});
  Value halt = b.value(b.buffer(BufferKind::Arena, "halt", Dims{1}), Dims{1});
  Value w = b.value(b.buffer(BufferKind::External, "w", Dims{6, 5}), Dims{6, 5});
  auto product = [&](Block& code) {
    Value r = b.value(b.buffer(BufferKind::Arena, "r", Dims{4, 5}), Dims{4, 5});
    code.push_back(b.call(OpId::matmul, {b.x(), w}, r));
    return Value{r.buffer, 0, Dims{5, 4}, Dims{1, 5}, DType::Float32};  // r transposed
  };
  auto copy = [&](Block& code, const Value& from) {
    Value out = b.value(b.buffer(BufferKind::Arena, "t", Dims{5, 4}), Dims{5, 4});
    code.push_back(b.call(OpId::contiguous, {from}, out));
    return out;
  };
  Block body;
  Value t = copy(body, product(body));
  Value outer = product(b.p.body);  // made outside the loop, copied inside it: kept
  Value u = copy(body, outer);
  b.p.body.push_back(b.region(InstrKind::While, halt, {{}, body}, {t.buffer, u.buffer}));
  b.p.outputs = {t, u};
  Program p = fold_transposes(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::matmul, OpId::None}));
  const Block& folded = p.body[1].blocks[1];
  ASSERT_EQ(ops(folded), (std::vector<OpId>{OpId::matmul, OpId::contiguous}));
  EXPECT_EQ(folded[0].out[0].buffer, t.buffer);
  EXPECT_EQ(folded[0].in[0].buffer, w.buffer);  // (x w)^T = w^T x^T
  EXPECT_EQ(folded[0].in[1].buffer, b.x().buffer);
  EXPECT_EQ(folded[1].in[0].buffer, outer.buffer);
}

// x (4, 6) @ w^T + b with w (5, 6): the linear's result buffer.
Value emit_linear(Builder& b) {
  Value w = b.value(b.buffer(BufferKind::External, "w", Dims{5, 6}), Dims{5, 6});
  Value bias = b.value(b.buffer(BufferKind::External, "b", Dims{5}), Dims{5});
  Value y = b.value(b.buffer(BufferKind::Arena, "y", Dims{4, 5}), Dims{4, 5});
  b.p.body.push_back(b.call(OpId::linear, {b.x(), w, bias}, y));
  return y;
}

Value emit_on(Builder& b, OpId op, std::vector<Value> in) {
  Value out = b.value(b.buffer(BufferKind::Arena, "%" + std::to_string(b.p.buffers.size()), Dims{4, 5}), Dims{4, 5});
  b.p.body.push_back(b.call(op, std::move(in), out));
  return out;
}

// linear -> act -> exp, and act's backward reading the product y (with exp's result as the
// gradient); `also` adds a second reader of y as an output. Returns y and act's result.
std::pair<Value, Value> emit_activation_step(Builder& b, OpId act, OpId backward, bool also = false) {
  Value y = emit_linear(b);
  Value h = emit_on(b, act, {y});
  Value g = emit_on(b, OpId::exp, {h});
  b.p.outputs = {g, emit_on(b, backward, {g, y})};
  if (also) b.p.outputs.push_back(emit_on(b, OpId::neg, {y}));
  return {y, h};
}

TEST(FuseEpilogues, ALinearAndItsActivationBecomeOneCallThatKeepsTheProductForTheBackward) {
  Builder b(Dims{4, 6});
  b.p.device = Device{DeviceType::CUDA, 0};  // a GPU plan keeps the product itself, no derivative
  auto [y, h] = emit_activation_step(b, OpId::gelu, OpId::gelu_backward);
  Program p = fuse_epilogues(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::linear_gelu, OpId::exp, OpId::gelu_backward}));
  ASSERT_EQ(p.body[0].out.size(), 2u);
  EXPECT_EQ(p.body[0].out[0].buffer, h.buffer);
  EXPECT_EQ(p.body[0].out[1].buffer, y.buffer);
  EXPECT_TRUE(p.body[0].attrs.b("keep_input"));
  EXPECT_FALSE(p.body[0].attrs.b("keep_derivative"));
  EXPECT_EQ(p.body[0].in.size(), 3u);
}

TEST(FuseEpilogues, AReluBackwardReadsTheReluOutputAndTheProductIsNotKept) {
  Builder b(Dims{4, 6});
  auto [y, h] = emit_activation_step(b, OpId::relu, OpId::relu_backward);
  Program p = fuse_epilogues(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::linear_relu, OpId::exp, OpId::relu_backward}));
  ASSERT_EQ(p.body[0].out.size(), 1u);
  EXPECT_EQ(p.body[0].out[0].buffer, h.buffer);
  EXPECT_FALSE(p.body[0].attrs.b("keep_input"));
  EXPECT_EQ(p.body[2].in[1].buffer, h.buffer);  // y > 0 exactly where relu(y) > 0
}

TEST(FuseEpilogues, AGeluReadOnlyByItsBackwardKeepsTheDerivativeAndTheBackwardMultiplies) {
  for (auto [act, backward, fused] : {std::tuple{OpId::gelu, OpId::gelu_backward, OpId::linear_gelu},
                                      std::tuple{OpId::gelu_tanh, OpId::gelu_tanh_backward, OpId::linear_gelu_tanh},
                                      std::tuple{OpId::silu, OpId::silu_backward, OpId::linear_silu}}) {
    Builder b(Dims{4, 6});
    auto [y, h] = emit_activation_step(b, act, backward);
    Program p = fuse_epilogues(b.p);
    ASSERT_EQ(ops(p.body), (std::vector<OpId>{fused, OpId::exp, OpId::mul}));
    EXPECT_TRUE(p.body[0].attrs.b("keep_input") && p.body[0].attrs.b("keep_derivative"));
    EXPECT_EQ(p.body[0].out[0].buffer, h.buffer);
    EXPECT_EQ(p.body[0].out[1].buffer, y.buffer);  // now holding act'(y)
    EXPECT_EQ(p.body[2].in[1].buffer, y.buffer);
  }
}

TEST(FuseEpilogues, AProductAnotherOpAlsoReadsKeepsNoDerivative) {
  for (auto [act, backward] : {std::pair{OpId::gelu, OpId::gelu_backward}, std::pair{OpId::relu, OpId::relu_backward}}) {
    Builder b(Dims{4, 6});
    Value y = emit_activation_step(b, act, backward, /*also=*/true).first;
    Program p = fuse_epilogues(b.p);
    EXPECT_TRUE(p.body[0].attrs.b("keep_input"));
    EXPECT_FALSE(p.body[0].attrs.b("keep_derivative"));
    EXPECT_EQ(p.body[2].op->id, backward);
    EXPECT_EQ(p.body[2].in[1].buffer, y.buffer);
  }
}

TEST(FuseEpilogues, AProductOnlyTheActivationReadsIsNotKept) {
  Builder b(Dims{4, 6});
  Value y = emit_linear(b);
  b.p.outputs = {emit_on(b, OpId::tanh, {y})};
  Program p = fuse_epilogues(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::linear_tanh}));
  ASSERT_EQ(p.body[0].out.size(), 1u);
  EXPECT_EQ(p.body[0].out[0].buffer, b.p.outputs[0].buffer);
  EXPECT_FALSE(p.body[0].attrs.b("keep_input"));
}

TEST(FuseEpilogues, AProductThatIsAStepOutputIsKept) {
  Builder b(Dims{4, 6});
  Value y = emit_linear(b);
  b.p.outputs = {y, emit_on(b, OpId::relu, {y})};
  Program p = fuse_epilogues(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::linear_relu}));
  EXPECT_EQ(p.body[0].out.size(), 2u);
}

TEST(FuseEpilogues, LeavesOtherOpsPartialReadsAndRewrittenProductsAlone) {
  Builder b(Dims{4, 6});
  Value y = emit_linear(b);
  Value part{y.buffer, 0, Dims{4, 2}, Dims{5, 1}, DType::Float32};
  Value r = b.value(b.buffer(BufferKind::Arena, "r", Dims{4, 2}), Dims{4, 2});
  b.p.body.push_back(b.call(OpId::relu, {part}, r));  // a slice of the product: not the whole
  Value e = emit_on(b, OpId::exp, {y});               // not an activation the pass fuses
  b.p.outputs = {r, e};
  EXPECT_EQ(ops(fuse_epilogues(b.p).body), (std::vector<OpId>{OpId::linear, OpId::relu, OpId::exp}));
  Builder c(Dims{4, 6});
  Value z = emit_linear(c);
  c.p.body.push_back({&op_def(OpId::relu_), {}, {z}, {z}});  // written twice: running relu early is not exact
  c.p.outputs = {emit_on(c, OpId::sigmoid, {z})};
  EXPECT_EQ(ops(fuse_epilogues(c.p).body), (std::vector<OpId>{OpId::linear, OpId::relu_, OpId::sigmoid}));
}

TEST(FuseEpilogues, AnActivationBackwardAndTheColumnSumOfItsResultBecomeOneCallOnTheCpu) {
  Builder b(Dims{2, 4, 5});
  Value x = b.value(b.buffer(BufferKind::External, "pre", b.shape));
  Value dx = b.emit(OpId::silu_backward, {b.x(), x});
  Value db = b.value(b.buffer(BufferKind::Arena, "db", Dims{5}), Dims{5});
  Value dw = b.emit(OpId::exp, {dx});
  b.p.body.push_back({&op_def(OpId::sum), Attrs{{"dims", Dims{0, 1}}, {"keepdim", false}}, {dx}, {db}});
  b.p.outputs = {dw, db};
  Program p = fuse_epilogues(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::silu_backward_colsum, OpId::exp}));
  ASSERT_EQ(p.body[0].out.size(), 2u);
  EXPECT_EQ(p.body[0].out[0].buffer, dx.buffer);
  EXPECT_EQ(p.body[0].out[1].buffer, db.buffer);
  b.p.body.back().attrs = Attrs{{"dims", Dims{0}}, {"keepdim", false}};  // not every leading dim
  b.p.body.back().out[0] = b.value(b.buffer(BufferKind::Arena, "db2", Dims{4, 5}), Dims{4, 5});
  EXPECT_EQ(ops(fuse_epilogues(b.p).body), (std::vector<OpId>{OpId::silu_backward, OpId::exp, OpId::sum}));
  b.p.device = Device{DeviceType::CUDA, 0};  // CUDA plans fuse elementwise chains their own way
  b.p.body.back().attrs = Attrs{{"dims", Dims{0, 1}}, {"keepdim", false}};
  b.p.body.back().out[0] = db;
  EXPECT_EQ(ops(fuse_epilogues(b.p).body), (std::vector<OpId>{OpId::silu_backward, OpId::exp, OpId::sum}));
}

// s = x0 + r, then layer_norm(s, w, b) over the last dim of (4, 6).
struct ResidualNorm {
  Value r, w, bias, s, y, mean, rstd;
};
ResidualNorm emit_residual_norm(Builder& b, Value r) {
  ResidualNorm n;
  n.r = r;
  n.w = b.value(b.buffer(BufferKind::External, "w", Dims{6}), Dims{6});
  n.bias = b.value(b.buffer(BufferKind::External, "b", Dims{6}), Dims{6});
  n.s = b.emit(OpId::add, {b.x(), r});
  n.y = b.fresh();
  n.mean = b.value(b.buffer(BufferKind::Arena, "mean", Dims{4, 1}), Dims{4, 1});
  n.rstd = b.value(b.buffer(BufferKind::Arena, "rstd", Dims{4, 1}), Dims{4, 1});
  Attrs attrs{{"normalized_shape", Dims{6}}, {"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}};
  b.p.body.push_back({&op_def(OpId::layer_norm), attrs, {n.s, n.w, n.bias}, {n.y, n.mean, n.rstd}});
  return n;
}

TEST(FuseAddNorm, AResidualAddAndTheLayerNormOfItsSumBecomeOneCallThatKeepsTheSum) {
  Builder b(Dims{4, 6});
  ResidualNorm n = emit_residual_norm(b, b.value(b.buffer(BufferKind::External, "r")));
  b.p.outputs = {b.emit(OpId::exp, {n.s}), n.y};  // the sum is read again (the next residual add)
  Program p = fuse_add_norm(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::add_layer_norm, OpId::exp}));
  const Instr& fused = p.body[0];
  ASSERT_EQ(fused.in.size(), 4u);
  EXPECT_EQ(fused.in[0].buffer, b.x().buffer);
  EXPECT_EQ(fused.in[1].buffer, n.r.buffer);
  EXPECT_EQ(fused.in[2].buffer, n.w.buffer);
  EXPECT_EQ(fused.in[3].buffer, n.bias.buffer);
  ASSERT_EQ(fused.out.size(), 4u);
  EXPECT_EQ(fused.out[0].buffer, n.s.buffer);
  EXPECT_EQ(fused.out[1].buffer, n.y.buffer);
  EXPECT_EQ(fused.out[2].buffer, n.mean.buffer);
  EXPECT_EQ(fused.out[3].buffer, n.rstd.buffer);
  EXPECT_EQ(fused.attrs.dims("normalized_shape"), Dims{6});
  EXPECT_TRUE(fused.attrs.b("has_bias"));
}

TEST(FuseAddNorm, LeavesBroadcastAddsAndWeightsWrittenInBetweenAlone) {
  Builder b(Dims{4, 6});
  Value row = b.value(b.buffer(BufferKind::External, "row", Dims{6}), Dims{6});
  ResidualNorm n = emit_residual_norm(b, row);  // x0 + a broadcast row
  b.p.outputs = {n.y};
  EXPECT_EQ(ops(fuse_add_norm(b.p).body), (std::vector<OpId>{OpId::add, OpId::layer_norm}));
  Builder c(Dims{4, 6});
  ResidualNorm m = emit_residual_norm(c, c.value(c.buffer(BufferKind::External, "r")));
  c.p.body.insert(c.p.body.begin() + 1, {&op_def(OpId::relu_), {}, {m.w}, {m.w}});  // the norm reads the new weight
  c.p.outputs = {m.y};
  EXPECT_EQ(ops(fuse_add_norm(c.p).body), (std::vector<OpId>{OpId::add, OpId::relu_, OpId::layer_norm}));
}

// norm_backward(g = x0, s, w, mean, rstd) -> (dx, dw, db) over (4, 6), not accumulating.
Instr norm_backward_call(Builder& b, Value dx, Value dw, Value db) {
  Value s = b.value(b.buffer(BufferKind::External, "s"));
  Value w = b.value(b.buffer(BufferKind::External, "w", Dims{6}), Dims{6});
  Value mean = b.value(b.buffer(BufferKind::External, "mean", Dims{4, 1}), Dims{4, 1});
  Value rstd = b.value(b.buffer(BufferKind::External, "rstd", Dims{4, 1}), Dims{4, 1});
  Attrs attrs{{"rms", false}, {"has_weight", true}, {"cols", int64_t{6}}, {"accumulate", false}};
  return {&op_def(OpId::norm_backward), attrs, {b.x(), s, w, mean, rstd}, {dx, dw, db}};
}

TEST(FuseAddNorm, ANormBackwardWhoseDxOnlyAnAddReadsAccumulatesTheResidualGradient) {
  Builder b(Dims{4, 6});
  Value residual = b.emit(OpId::exp, {b.x()});
  Value dx = b.fresh();
  Value dw = b.value(b.buffer(BufferKind::Arena, "dw", Dims{6}), Dims{6});
  Value db = b.value(b.buffer(BufferKind::Arena, "db", Dims{6}), Dims{6});
  b.p.body.push_back(norm_backward_call(b, dx, dw, db));
  Value total = b.emit(OpId::add, {residual, dx});
  b.p.outputs = {total, dw, db};
  Program p = fuse_add_norm(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::exp, OpId::norm_backward}));
  const Instr& fused = p.body[1];
  EXPECT_TRUE(fused.attrs.b("accumulate"));
  ASSERT_EQ(fused.in.size(), 6u);
  EXPECT_EQ(fused.in[5].buffer, residual.buffer);
  EXPECT_EQ(fused.out[0].buffer, total.buffer);
  EXPECT_EQ(fused.out[1].buffer, dw.buffer);
  EXPECT_EQ(fuse_add_norm(p).body.size(), 2u);  // already accumulating: left as it is

  Builder c(Dims{4, 6});  // dx read by another call too: the add stays
  Value dx2 = c.fresh();
  c.p.body.push_back(norm_backward_call(c, dx2, c.value(c.buffer(BufferKind::Arena, "dw", Dims{6}), Dims{6}),
                                        c.value(c.buffer(BufferKind::Arena, "db", Dims{6}), Dims{6})));
  c.p.outputs = {c.emit(OpId::add, {c.x(), dx2}), c.emit(OpId::neg, {dx2})};
  EXPECT_EQ(ops(fuse_add_norm(c.p).body), (std::vector<OpId>{OpId::norm_backward, OpId::add, OpId::neg}));

  Builder d(Dims{4, 6});  // the residual gradient is made after the norm's backward: not ready at its place
  Value dx3 = d.fresh();
  d.p.body.push_back(norm_backward_call(d, dx3, d.value(d.buffer(BufferKind::Arena, "dw", Dims{6}), Dims{6}),
                                        d.value(d.buffer(BufferKind::Arena, "db", Dims{6}), Dims{6})));
  Value late = d.emit(OpId::exp, {d.x()});
  d.p.outputs = {d.emit(OpId::add, {dx3, late})};
  EXPECT_EQ(ops(fuse_add_norm(d.p).body), (std::vector<OpId>{OpId::norm_backward, OpId::exp, OpId::add}));

  Builder e(Dims{4, 6});  // dx + dx: no other operand to accumulate
  Value dx4 = e.fresh();
  e.p.body.push_back(norm_backward_call(e, dx4, e.value(e.buffer(BufferKind::Arena, "dw", Dims{6}), Dims{6}),
                                        e.value(e.buffer(BufferKind::Arena, "db", Dims{6}), Dims{6})));
  e.p.outputs = {e.emit(OpId::add, {dx4, dx4})};
  EXPECT_EQ(ops(fuse_add_norm(e.p).body), (std::vector<OpId>{OpId::norm_backward, OpId::add}));
}

TEST(GuardUpdates, WrapsAnUpdateWhoseGradientOnlyOneBranchComputes) {
  Builder b(Dims{4});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  int grad = b.buffer(BufferKind::Arena, "g");
  Block computes;
  computes.push_back(b.call(OpId::exp, {b.x()}, b.value(grad)));
  Instr branch = b.region(InstrKind::Switch, selector, {computes, {}}, {grad});
  branch.region.present = {{0}};
  b.p.body.push_back(branch);
  Value param = b.value(b.buffer(BufferKind::External, "w"));
  Value lr = b.value(b.buffer(BufferKind::External, "lr", Dims{1}), Dims{1});
  Value momentum = b.value(b.buffer(BufferKind::External, "m"));
  b.p.body.push_back(b.call(OpId::sgd_update, {param, b.value(grad), lr, momentum}, param));
  b.p.body.back().out.clear();
  Program p = guard_updates(b.p);
  ASSERT_EQ(p.body.size(), 2u);
  const Instr& guard = p.body[1];
  EXPECT_EQ(guard.kind, InstrKind::Guard);
  EXPECT_EQ(guard.region.guard, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_EQ(ops(guard.blocks[0]), (std::vector<OpId>{OpId::sgd_update}));
  EXPECT_EQ(p.regions, 2);
}

TEST(GuardUpdates, GuardsAParameterUpdateScopeAsAWhole) {
  // A composed optimizer's update of one parameter: state decay first (no gradient read), then
  // the gradient's square; the guard must hold both, and the next parameter's scope neither.
  Builder b(Dims{4});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  int grad = b.buffer(BufferKind::Arena, "g");
  Block computes;
  computes.push_back(b.call(OpId::exp, {b.x()}, b.value(grad)));
  Instr branch = b.region(InstrKind::Switch, selector, {computes, {}}, {grad});
  branch.region.present = {{0}};
  b.p.body.push_back(branch);
  Value state = b.value(b.buffer(BufferKind::External, "square_avg"));
  Value other = b.value(b.buffer(BufferKind::External, "square_avg2"));
  for (auto [target, scope] : {std::pair{state, 0}, {other, 1}}) {
    b.p.body.push_back(b.call(OpId::mul_, {target, target}, target));
    b.p.body.back().scope = scope;
    if (scope == 0) {
      b.p.body.push_back(b.call(OpId::add_, {target, b.value(grad)}, target));
      b.p.body.back().scope = scope;
    }
  }
  Program p = guard_updates(b.p);
  ASSERT_EQ(p.body.size(), 3u);
  EXPECT_EQ(p.body[1].kind, InstrKind::Guard);
  EXPECT_EQ(ops(p.body[1].blocks[0]), (std::vector<OpId>{OpId::mul_, OpId::add_}));
  EXPECT_EQ(p.body[2].kind, InstrKind::Call);  // the other parameter's gradient always exists
}

TEST(Dce, DropsASwitchWhoseResultsNobodyReads) {
  Builder b(Dims{4});
  Value selector = b.value(b.buffer(BufferKind::Input, "sel", Dims{1}), Dims{1});
  int owned = b.buffer(BufferKind::Arena, "owned");
  Block block;
  Value v = b.emit(block, OpId::exp, {b.x()});
  block.push_back(b.call(OpId::contiguous, {v}, b.value(owned)));
  b.p.body.push_back(b.region(InstrKind::Switch, selector, {block, block}, {owned}));
  b.p.outputs = {b.emit(OpId::neg, {b.x()})};
  Program p = dce(b.p);
  EXPECT_EQ(ops(p.body), (std::vector<OpId>{OpId::neg}));
}

TEST(Memory, ReusesBytesOfDeadBuffersAndTheCheckerProvesIt) {
  Builder b(Dims{16});
  Value a = b.emit(OpId::exp, {b.x()});
  Value c = b.emit(OpId::exp, {a});
  Value d = b.emit(OpId::exp, {c});  // a is dead by now: d may take its bytes
  b.p.outputs = {d};
  const DefUse du = def_use(b.p);
  EXPECT_EQ(du.first[a.buffer], 0);
  EXPECT_EQ(du.last[a.buffer], 1);
  EXPECT_EQ(du.last[d.buffer], du.end);
  MemoryPlan m = plan_memory(b.p, du);
  EXPECT_EQ(m.offset[d.buffer], m.offset[a.buffer]);
  EXPECT_NE(m.offset[c.buffer], m.offset[a.buffer]);
  EXPECT_LT(m.arena_bytes, m.naive_bytes);
  EXPECT_EQ(m.released[1], (std::vector<int>{a.buffer}));
  check_memory(b.p, m);
  m.offset[c.buffer] = m.offset[d.buffer];  // c and d live at the same time
  try {
    check_memory(b.p, m);
    FAIL() << "check_memory accepted overlapping buffers";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Runtime);
    EXPECT_NE(std::string(e.what()).find("are alive at the same time and share arena bytes"), std::string::npos);
  }
}

TEST(Memory, ALoopKeepsWhatItsBodyTouchesAliveThroughAllIterations) {
  Builder b(Dims{16});
  Value halt = b.value(b.buffer(BufferKind::Arena, "halt", Dims{1}), Dims{1});
  Block body;
  Value t = b.emit(body, OpId::exp, {b.x()});
  body.push_back(b.call(OpId::relu, {t}, b.fresh()));
  Instr loop = b.region(InstrKind::While, halt, {{}, body}, {});
  b.p.body.push_back(loop);
  b.p.outputs = {b.emit(OpId::neg, {b.x()})};
  const DefUse du = def_use(b.p);
  EXPECT_EQ(du.first[t.buffer], 0);  // the loop's entry
  EXPECT_EQ(du.last[t.buffer], 3);   // its exit
  check_memory(b.p, plan_memory(b.p, du));
}

// Two square products of x (4x4) side by side: x @ x into a and x @ x^T into b.
TEST(PairGemms, TwoIndependentProductsBecomeOnePairAndADependentOneStaysApart) {
  Builder b(Dims{4, 4});
  Value xt{b.x().buffer, 0, Dims{4, 4}, Dims{1, 4}, DType::Float32};
  Value a = b.emit(OpId::matmul, {b.x(), b.x()});
  Value c = b.emit(OpId::matmul, {b.x(), xt});
  Value d = b.emit(OpId::matmul, {a, c});  // reads both results: not paired with either
  b.p.outputs = {d};
  Program p = pair_gemms(b.p);
  ASSERT_EQ(ops(p.body), (std::vector<OpId>{OpId::matmul_pair, OpId::matmul}));
  ASSERT_EQ(p.body[0].in.size(), 4u);
  EXPECT_TRUE(same(p.body[0].in[3], xt));
  ASSERT_EQ(p.body[0].out.size(), 2u);
  EXPECT_EQ(p.body[0].out[0].buffer, a.buffer);
  EXPECT_EQ(p.body[0].out[1].buffer, c.buffer);
  check_memory(p, plan_memory(p, def_use(p)));
}

TEST(PairGemms, AProductOfTheOtherOnesResultOrOfHalfsIsLeftAlone) {
  Builder b(Dims{4, 4});
  Value a = b.emit(OpId::matmul, {b.x(), b.x()});
  Value c = b.emit(OpId::matmul, {a, b.x()});  // reads a
  int h = b.p.add_buffer({BufferKind::Arena, "h", 32, cpu_device(), DType::Float16});
  Value half{h, 0, Dims{4, 4}, contiguous_strides(Dims{4, 4}), DType::Float16};
  Value e = b.fresh();
  e.dtype = DType::Float16;
  b.p.body.push_back(b.call(OpId::matmul, {half, half}, e));
  b.p.outputs = {c, e};
  Program p = pair_gemms(b.p);
  EXPECT_EQ(ops(p.body), (std::vector<OpId>{OpId::matmul, OpId::matmul, OpId::matmul}));
}

TEST(Pipeline, CountsEveryReportedPassAndChainsThem) {
  Builder b(Dims{4});
  Value e1 = b.emit(OpId::exp, {b.x()});
  b.emit(OpId::exp, {b.x()});
  b.p.outputs = {b.emit(OpId::neg, {e1})};
  std::vector<std::tuple<std::string, int64_t, int64_t>> counts;
  Program p = run_pipeline(b.p, &counts);
  ASSERT_EQ(counts.size(), 9u);
  EXPECT_EQ(std::get<0>(counts[0]), "cse");
  EXPECT_EQ(std::get<1>(counts[0]), 3);
  EXPECT_EQ(std::get<2>(counts[0]), 2);
  for (size_t k = 1; k < counts.size(); ++k) EXPECT_EQ(std::get<2>(counts[k - 1]), std::get<1>(counts[k]));
  EXPECT_EQ(p.body.size(), 2u);
}

}  // namespace
}  // namespace fg::plan
