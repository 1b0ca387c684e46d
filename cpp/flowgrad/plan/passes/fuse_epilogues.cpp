// Epilogue fusion (passes.h). An activation applied to a linear's result runs inside the linear
// (linear_<act>), over the product while it is in cache, instead of as a pass of its own; the
// fused op calls the same activation kernel on the same values, so the results are the same bits.
// On the CPU, an activation's backward whose result a column sum reduces (the bias gradient)
// becomes <act>_backward_colsum, one pass writing both. Each fused call takes the place of the
// first call and the second goes: exact when the second reads only values ready by then and its
// result is written nowhere else.
// A linear_relu's backward reads the ReLU's output instead of the product (the same mask), so the
// product is not kept. On the CPU a linear_<act> whose product only that activation's backward
// reads again keeps the derivative there instead (gelu, gelu_tanh, silu: costly functions of the
// product, computed in the GEMM's store with the activation, which shares most of the work): the
// backward becomes a multiply (mul_colsum with the bias gradient), the same bits (functors.h).
#include <optional>
#include <vector>

#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

// The linear_<act> op for an activation, or null.
const OpDef* linear_with(OpId act) {
  switch (act) {
    case OpId::relu: return op_rows::linear_relu;
    case OpId::gelu: return op_rows::linear_gelu;
    case OpId::gelu_tanh: return op_rows::linear_gelu_tanh;
    case OpId::silu: return op_rows::linear_silu;
    case OpId::tanh: return op_rows::linear_tanh;
    case OpId::sigmoid: return op_rows::linear_sigmoid;
    default: return nullptr;
  }
}

// The backward op of an activation whose derivative linear_<act> can keep, or none.
std::optional<OpId> kept_backward(OpId act) {
  switch (act) {
    case OpId::gelu: return OpId::gelu_backward;
    case OpId::gelu_tanh: return OpId::gelu_tanh_backward;
    case OpId::silu: return OpId::silu_backward;
    default: return std::nullopt;
  }
}

// The <act>_backward_colsum op for an activation's backward (mul_colsum for a multiply), or null.
const OpDef* colsum_of(OpId backward) {
  switch (backward) {
    case OpId::mul: return op_rows::mul_colsum;
    case OpId::relu_backward: return op_rows::relu_backward_colsum;
    case OpId::gelu_backward: return op_rows::gelu_backward_colsum;
    case OpId::gelu_tanh_backward: return op_rows::gelu_tanh_backward_colsum;
    case OpId::silu_backward: return op_rows::silu_backward_colsum;
    case OpId::tanh_backward: return op_rows::tanh_backward_colsum;
    case OpId::sigmoid_backward: return op_rows::sigmoid_backward_colsum;
    default: return nullptr;
  }
}

// The first call after `i` that reads all of its result and `wanted` accepts; -1 when there is
// none or its result is written elsewhere too.
template <class Wanted>
int reader_of(const Block& code, size_t i, const DefUse& du, const Wanted& wanted) {
  const Value& y = code[i].out[0];
  if (du.writers[y.buffer] != 1) return -1;
  for (size_t j = i + 1; j < code.size(); ++j) {
    const Instr& next = code[j];
    if (next.kind != InstrKind::Call || next.in.size() != 1 || !same(next.in[0], y) || !wanted(next)) continue;
    const Value& r = next.out[0];
    return r.dtype == y.dtype && dense(r) && du.writers[r.buffer] == 1 ? static_cast<int>(j) : -1;
  }
  return -1;
}

// A sum over every dim but the last.
bool is_column_sum(const Instr& ins) {
  if (!is_call(ins, OpId::sum) || ins.attrs.b("keepdim")) return false;
  const Dims& dims = ins.attrs.dims("dims");
  if (dims.size() + 1 != ins.in[0].shape.size()) return false;
  for (int d = 0; d < dims.size(); ++d)
    if (dims[d] != d) return false;
  return true;
}

// A multiply of two operands of its result's shape and dtype (nothing broadcast or promoted).
bool plain_multiply(const Instr& ins) {
  const Value& out = ins.out[0];
  return ins.in.size() == 2 && ins.in[0].shape == out.shape && ins.in[1].shape == out.shape &&
         ins.in[0].dtype == out.dtype && ins.in[1].dtype == out.dtype;
}

// The calls after `from` that read y, when every reader of y but one (the activation) is among
// them (none nested in a branch or loop) and each is `backward` (g, y) with g elsewhere; else empty.
std::vector<size_t> backward_readers(const Block& code, size_t from, const Value& y, OpId backward, const DefUse& du) {
  std::vector<size_t> found;
  for (size_t k = from + 1; k < code.size(); ++k) {
    const Instr& next = code[k];
    bool reads = false;
    for (const Value& v : next.in) reads |= v.buffer == y.buffer;
    if (!reads) continue;
    if (!is_call(next, backward) || next.in.size() != 2 || !same(next.in[1], y) || next.in[0].buffer == y.buffer)
      return {};
    found.push_back(k);
  }
  if (static_cast<int>(found.size()) + 1 != du.readers[y.buffer]) return {};
  return found;
}

// On the CPU an activation backward (or a multiply of two equal shapes) absorbs the column sum of
// its result; a linear absorbs the activation of its result. Returns the absorbed instruction's
// index, or -1.
int absorb_epilogue(const Program& p, Block& code, size_t i, const DefUse& du) {
  Instr& ins = code[i];
  if (colsum_of(ins.op->id) && (ins.op->id != OpId::mul || plain_multiply(ins)) && p.device.is_cpu() &&
      is_floating(ins.out[0].dtype) && !is_half(ins.out[0].dtype) && dense(ins.out[0]) && ins.out[0].shape.size() >= 2) {
    int j = reader_of(code, i, du, is_column_sum);
    if (j >= 0) {
      ins.op = colsum_of(ins.op->id);
      ins.out.push_back(code[j].out[0]);
    }
    return j;
  }
  if (ins.op->id != OpId::linear || is_half(ins.out[0].dtype)) return -1;  // halves: activations widen them
  int j = reader_of(code, i, du, [](const Instr& next) { return linear_with(next.op->id) != nullptr; });
  if (j < 0) return -1;
  const Value& y = ins.out[0];
  const OpId act = code[j].op->id;
  // The product stays an output when something else reads it (the activation's backward).
  bool keep = du.readers[y.buffer] > 1 || p.buffers[y.buffer].kind != BufferKind::Arena || is_result(p, y.buffer);
  std::vector<size_t> backward;  // the backward calls that read the product only for the activation
  if (keep && p.buffers[y.buffer].kind == BufferKind::Arena && !is_result(p, y.buffer)) {
    if (act == OpId::relu) {  // y > 0 exactly where relu(y) > 0 (NaN: neither): read the ReLU's output
      backward = backward_readers(code, j, y, OpId::relu_backward, du);
      for (size_t k : backward) code[k].in[1] = code[j].out[0];
      keep = backward.empty();
    } else if (std::optional<OpId> b = kept_backward(act); b && p.device.is_cpu()) {
      backward = backward_readers(code, j, y, *b, du);
      for (size_t k : backward) code[k].op = op_rows::mul;  // times the derivative kept in y
    }
  }
  ins.op = linear_with(act);
  ins.attrs = Attrs{{"keep_input", keep}, {"keep_derivative", keep && !backward.empty()}};
  ins.out = keep ? std::vector<Value>{code[j].out[0], y} : std::vector<Value>{code[j].out[0]};
  return j;
}

}  // namespace

Program fuse_epilogues(Program p) {
  const DefUse du = def_use(p);
  absorb_pairs(p.body, [&](Block& code, size_t i) { return absorb_epilogue(p, code, i, du); });
  return p;
}

}  // namespace fg::plan
