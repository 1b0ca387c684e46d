// A compiled plan's random draws (plan/build.cpp): every random call reads the step's {seed, base}
// pair as an ordinary input, and philox_advance_ moves it on in place. The def/use analysis and the
// passes see that dependency like any other; the kernels draw base + offset from the pair.
#include <gtest/gtest.h>

#include <cstring>

#include "flowgrad/ops/ops.h"
#include "flowgrad/ops/rng.h"
#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

struct PairProgram {
  Program p;
  Value pair, drawn;

  PairProgram() {
    p.device = cpu_device();
    p.philox = p.add_buffer({BufferKind::External, "philox", 16, cpu_device(), DType::Int64});
    p.rng_advance = 12;
    pair = p.whole(p.philox);
    int out = p.add_buffer({BufferKind::Arena, "%1", 12 * 4, cpu_device(), DType::Float32});
    drawn = p.whole(out);
  }
  Instr rand(int64_t offset) const {
    Attrs attrs{{"shape", Dims{12}}, {"dtype", DType::Float32}, {"device", cpu_device()}, {"offset", offset},
                {"low", int64_t{0}}, {"high", int64_t{0}}};
    return {&op_def(OpId::rand), attrs, {pair}, {drawn}};
  }
  Instr advance() const { return {&op_def(OpId::philox_advance_), Attrs{{"by", p.rng_advance}}, {pair}, {pair}}; }
};

TEST(PhiloxPair, TheAnalysisSeesRandomCallsReadItAndTheAdvanceWriteIt) {
  PairProgram b;
  b.p.body = {b.rand(0), b.rand(0)};
  b.p.outputs = {b.drawn};
  DefUse draws = def_use(b.p);
  EXPECT_EQ(draws.readers[b.p.philox], 2);
  EXPECT_FALSE(draws.written(b.p.philox));  // a draw only reads the pair
  b.p.body.push_back(b.advance());
  DefUse du = def_use(b.p);
  EXPECT_EQ(du.readers[b.p.philox], 3);
  EXPECT_TRUE(du.written(b.p.philox));
  EXPECT_EQ(du.first[b.p.philox], 0);
  EXPECT_EQ(du.last[b.p.philox], 2);
}

TEST(PhiloxPair, DeadCodeDropsAnUnreadDrawButKeepsTheAdvance) {
  PairProgram b;
  b.p.body = {b.rand(0), b.advance()};  // nobody reads the draw
  Program p = dce(b.p);
  ASSERT_EQ(p.body.size(), 1u);
  EXPECT_EQ(p.body[0].op->id, OpId::philox_advance_);
}

TEST(PhiloxPair, CseNeverMergesTwoDrawsOfOneOffset) {
  PairProgram b;
  int other = b.p.add_buffer({BufferKind::Arena, "%2", 12 * 4, cpu_device(), DType::Float32});
  Instr second = b.rand(0);
  second.out = {b.p.whole(other)};
  b.p.body = {b.rand(0), second, b.advance()};
  b.p.outputs = {b.drawn, b.p.whole(other)};
  EXPECT_EQ(cse(b.p).body.size(), 3u);
}

Tensor pair_tensor(uint64_t seed, uint64_t base) {
  Tensor t = Tensor::empty(Dims{2}, DType::Int64, cpu_device());
  const uint64_t v[2] = {seed, base};
  std::memcpy(t.data_ptr(), v, sizeof v);
  return t;
}

Attrs random_attrs(int64_t offset) {
  return {{"shape", Dims{5, 3}}, {"dtype", DType::Float64}, {"device", cpu_device()}, {"offset", offset},
          {"low", int64_t{0}}, {"high", int64_t{0}}};
}

TEST(PhiloxPair, ADrawFromThePairEqualsTheEagerDrawAtBasePlusOffset) {
  for (OpId op : {OpId::rand, OpId::randn}) {
    Tensor from_pair = run_op1(op_def(op), {pair_tensor(77, 1000)}, random_attrs(40));
    Tensor eager = run_op1(op_def(op), {pair_tensor(77, 1040)}, random_attrs(0));
    Tensor shifted = run_op1(op_def(op), {pair_tensor(77, 1041)}, random_attrs(0));
    EXPECT_EQ(std::memcmp(from_pair.data_ptr(), eager.data_ptr(), 15 * sizeof(double)), 0);
    EXPECT_NE(std::memcmp(from_pair.data_ptr(), shifted.data_ptr(), 15 * sizeof(double)), 0);
  }
}

// philox_derive computes on a pair what derive_stream computes on the host: the seed of the
// stream derived with key (+ the index input) from the pair's base + offset, counters from 0.
TEST(PhiloxPair, TheDeriveOpMakesTheHostsDerivedStream) {
  auto derive = [](TensorList in, int64_t key, int64_t offset) {
    Tensor out = run_op1(op_def(OpId::philox_derive), in, Attrs{{"key", key}, {"offset", offset}});
    return std::pair{out.data<uint64_t>()[0], out.data<uint64_t>()[1]};
  };
  const RngState host = derive_stream(RngState{77, 1003}, 9);
  EXPECT_EQ(derive({pair_tensor(77, 1000)}, 9, 3), std::pair(host.seed, host.offset));
  EXPECT_EQ(host.offset, 0u);
  Tensor index = full(Dims{}, 4, DType::Int64, cpu_device());
  EXPECT_EQ(derive({pair_tensor(77, 1003), index}, 5, 0), std::pair(host.seed, uint64_t{0}));  // 5 + 4
  EXPECT_NE(derive({pair_tensor(77, 1003)}, 5, 0).first, host.seed);
  EXPECT_NE(derive({pair_tensor(78, 1003)}, 9, 0).first, host.seed);
}

TEST(PhiloxPair, TheAdvanceMovesTheBaseAndKeepsTheSeed) {
  Tensor pair = pair_tensor(77, 1000);
  run_op(op_def(OpId::philox_advance_), {pair}, Attrs{{"by", int64_t{45}}});
  EXPECT_EQ(pair.data<uint64_t>()[0], 77u);
  EXPECT_EQ(pair.data<uint64_t>()[1], 1045u);
}

TEST(PhiloxPair, AnythingButAnInt64PairIsRefusedByName) {
  Tensor wrong = Tensor::empty(Dims{3}, DType::Int64, cpu_device());
  try {
    run_op(op_def(OpId::philox_advance_), {wrong}, Attrs{{"by", int64_t{1}}});
    FAIL() << "a 3-element pair was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("philox_advance_: expected a {seed, base} pair"), std::string::npos)
        << e.what();
  }
  try {
    run_op(op_def(OpId::philox_advance_), {pair_tensor(1, 2)}, Attrs{{"by", int64_t{-1}}});
    FAIL() << "a negative advance was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("philox_advance_: by must be >= 0, got -1"), std::string::npos) << e.what();
  }
  try {
    run_op(op_def(OpId::rand), {Tensor::empty(Dims{2}, DType::Float32, cpu_device())}, random_attrs(0));
    FAIL() << "a float32 pair was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("rand: expected a {seed, base} pair"), std::string::npos)
        << e.what();
  }
  try {
    run_op(op_def(OpId::randn), {}, random_attrs(0));
    FAIL() << "a draw without a pair was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("randn: expected a {seed, base} pair, one contiguous int64 tensor of shape "
                                         "(2,); got 0 inputs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fg::plan
