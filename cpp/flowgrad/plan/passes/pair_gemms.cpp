// GEMM pairing (passes.h). A linear's backward computes its input gradient (g @ W) and its weight
// gradient (g^T @ x) as two matmuls side by side that do not depend on each other; one matmul_pair
// call runs them at once, each on one thread (ops/linalg.cpp says why that is faster). Exact: the
// pair computes the same two products, and the memory planner sees one instruction reading all
// four operands and writing both results, so no result can take an operand's bytes.
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

// A 2-D float32/float64 matmul on the CPU (the kernel runs a pair at once only when BLAS reads
// every operand in place; else one after the other, as before).
bool pairable(const Program& p, const Instr& ins) {
  if (!is_call(ins, OpId::matmul)) return false;
  const Value& out = ins.out[0];
  if (!p.buffers[out.buffer].device.is_cpu() || (out.dtype != DType::Float32 && out.dtype != DType::Float64))
    return false;
  for (const Value& v : ins.in)
    if (v.dtype != out.dtype || v.shape.size() != 2) return false;
  return true;
}

bool touches(const Instr& ins, int buffer) {
  for (const Value& v : ins.in)
    if (v.buffer == buffer) return true;
  return ins.out[0].buffer == buffer;
}

// matmul at i and matmul at i + 1, neither touching the other's result -> matmul_pair at i.
int pair_next(const Program& p, Block& code, size_t i) {
  if (i + 1 >= code.size() || !pairable(p, code[i]) || !pairable(p, code[i + 1])) return -1;
  Instr &first = code[i], &second = code[i + 1];
  if (touches(second, first.out[0].buffer) || touches(first, second.out[0].buffer)) return -1;
  first.op = op_rows::matmul_pair;
  first.in.insert(first.in.end(), second.in.begin(), second.in.end());
  first.out.push_back(second.out[0]);
  return static_cast<int>(i + 1);
}

}  // namespace

Program pair_gemms(Program p) {
  absorb_pairs(p.body, [&](Block& code, size_t i) { return pair_next(p, code, i); });
  return p;
}

}  // namespace fg::plan
