// Residual-norm fusion (passes.h). A pre-norm transformer adds a residual and normalises the sum
// (s = x + r; y = layer_norm(s)): one add_layer_norm call writes both while each row is in
// cache. Its backward adds the norm's input gradient to the residual's (add(norm_backward dx, g)):
// norm_backward accumulates g into dx in the same pass. Each fused call takes the place of the
// first call and the second goes: exact when the second's other inputs are not written between
// the two and the first's result (the sum, or dx) is written nowhere else. The same pass folds a
// ReLU into the batch_norm before it (forward) and relu_backward into the batch_norm_backward after
// it, where the intermediate has no other reader (fuse_batch_norm_relu below).
#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

// float32 or float64: what the norm kernels compute in without widening.
bool full_float(DType dt) { return is_floating(dt) && !is_half(dt); }

// An add of two operands of its result's shape and dtype (no broadcast, no promotion).
bool plain_add(const Instr& ins) {
  if (!is_call(ins, OpId::add)) return false;
  const Value& out = ins.out[0];
  for (const Value& v : ins.in)
    if (v.shape != out.shape || v.dtype != out.dtype) return false;
  return full_float(out.dtype) && dense(out);
}

// Whether an instruction of code[from, to) writes any of `values`' buffers.
bool written_between(const Block& code, size_t from, size_t to, const std::vector<Value>& values) {
  bool hit = false;
  for (size_t k = from; k < to && !hit; ++k)
    writes_deep(code[k], [&](const Value& w) {
      for (const Value& v : values) hit |= w.buffer == v.buffer;
    });
  return hit;
}

// The first call after `i` that reads code[i]'s result whole and `wanted` accepts; -1 when none.
template <class Wanted>
int reader_of(const Block& code, size_t i, const Wanted& wanted) {
  const Value& y = code[i].out[0];
  for (size_t j = i + 1; j < code.size(); ++j)
    if (code[j].kind == InstrKind::Call && wanted(code[j], y)) return static_cast<int>(j);
  return -1;
}

// s = add(x, r) at i, layer_norm(s, [w], [b]) at j -> add_layer_norm(x, r, [w], [b]) -> (s, y, mean, rstd)
// at i. Returns j, or -1 when the pair does not fuse.
int fuse_forward(Block& code, size_t i, const DefUse& du) {
  Instr& add = code[i];
  if (!plain_add(add) || du.writers[add.out[0].buffer] != 1) return -1;
  int j = reader_of(code, i, [](const Instr& next, const Value& s) {
    return next.op->id == OpId::layer_norm && same(next.in[0], s);
  });
  if (j < 0) return -1;
  const Instr& norm = code[j];
  std::vector<Value> params(norm.in.begin() + 1, norm.in.end());
  if (written_between(code, i + 1, j, params)) return -1;
  add.op = op_rows::add_layer_norm;
  add.attrs = norm.attrs;
  add.in.insert(add.in.end(), params.begin(), params.end());
  add.out.insert(add.out.end(), norm.out.begin(), norm.out.end());
  return j;
}

// dx of norm_backward at i, read only by add(dx, g) or add(g, dx) at j -> norm_backward with g
// accumulated, writing the add's result, at i. Returns j, or -1.
int fuse_backward(Block& code, size_t i, const DefUse& du, const Program& p) {
  Instr& nb = code[i];
  if (!is_call(nb, OpId::norm_backward) || nb.attrs.b("accumulate")) return -1;
  const Value& dx = nb.out[0];
  if (du.writers[dx.buffer] != 1 || du.readers[dx.buffer] != 1 || p.buffers[dx.buffer].kind != BufferKind::Arena ||
      is_result(p, dx.buffer) || !full_float(dx.dtype))
    return -1;
  int j = reader_of(code, i, [](const Instr& next, const Value& v) {
    return plain_add(next) && (same(next.in[0], v) || same(next.in[1], v));
  });
  if (j < 0) return -1;
  const Instr& add = code[j];
  const Value& g = same(add.in[0], dx) ? add.in[1] : add.in[0];
  if (g.buffer == dx.buffer || du.writers[add.out[0].buffer] != 1 || written_between(code, i + 1, j, {g})) return -1;
  nb.attrs.set("accumulate", true);
  nb.in.push_back(g);
  nb.out[0] = add.out[0];
  return j;
}

// A buffer of the arena written once, that the step neither returns nor binds to a gradient.
bool private_temporary(const Program& p, const DefUse& du, const Value& v) {
  return du.writers[v.buffer] == 1 && p.buffers[v.buffer].kind == BufferKind::Arena && !is_result(p, v.buffer) &&
         dense(v);
}

// BatchNorm + ReLU. y = batch_norm(x, ...) at i, r = relu(y) at j -> batch_norm with relu writing r at
// i; relu saves its input, so each relu_backward(g, y) reads r instead (r > 0 exactly where y > 0,
// NaN included). Only where y has no other reader. Returns j, or -1.
int fuse_batch_norm_relu(Block& code, size_t i, const DefUse& du, const Program& p) {
  Instr& bn = code[i];
  if (!is_call(bn, OpId::batch_norm) || bn.attrs.b("relu")) return -1;
  const Value y = bn.out[0];
  if (!private_temporary(p, du, y)) return -1;
  int j = reader_of(code, i, [](const Instr& next, const Value& v) {
    return next.op->id == OpId::relu && same(next.in[0], v);
  });
  if (j < 0 || !private_temporary(p, du, code[j].out[0])) return -1;
  std::vector<size_t> saved;  // the relu_backward calls reading y
  for (size_t k = j + 1; k < code.size(); ++k)
    if (is_call(code[k], OpId::relu_backward) && same(code[k].in[1], y) && !same(code[k].in[0], y)) saved.push_back(k);
  if (du.readers[y.buffer] != static_cast<int>(1 + saved.size())) return -1;
  const Value r = code[j].out[0];
  for (size_t k : saved) code[k].in[1] = r;
  bn.attrs.set("relu", true);
  bn.out[0] = r;
  return j;
}

// gy = relu_backward(g, r) at i, read only by batch_norm_backward(gy, x, ...) at j ->
// batch_norm_backward(g, x, ..., r) with relu, at i: the mask applied in its own passes. Returns j, or -1.
int fuse_relu_batch_norm_backward(Block& code, size_t i, const DefUse& du, const Program& p) {
  const Instr& rb = code[i];
  if (!is_call(rb, OpId::relu_backward)) return -1;
  const Value& gy = rb.out[0];
  if (!private_temporary(p, du, gy) || du.readers[gy.buffer] != 1) return -1;
  int j = reader_of(code, i, [](const Instr& next, const Value& v) {
    return next.op->id == OpId::batch_norm_backward && !next.attrs.b("relu") && same(next.in[0], v);
  });
  if (j < 0) return -1;
  Instr fused = code[j];
  std::vector<Value> operands(fused.in.begin() + 1, fused.in.end());
  operands.push_back(rb.in[0]), operands.push_back(rb.in[1]);
  if (written_between(code, i + 1, j, operands) || rb.in[0].dtype != gy.dtype || rb.in[1].dtype != gy.dtype ||
      rb.in[0].shape != gy.shape || rb.in[1].shape != gy.shape)
    return -1;
  for (const Value& out : fused.out)  // its results, written at i now, untouched before j
    if (du.writers[out.buffer] != 1 || du.first[out.buffer] < du.first[gy.buffer]) return -1;
  fused.attrs.set("relu", true);
  fused.in[0] = rb.in[0];
  fused.in.push_back(rb.in[1]);
  code[i] = std::move(fused);
  return j;
}

}  // namespace

Program fuse_add_norm(Program p) {
  const DefUse du = def_use(p);
  absorb_pairs(p.body, [&](Block& code, size_t i) {
    int j = fuse_forward(code, i, du);
    if (j < 0) j = fuse_backward(code, i, du, p);
    if (j < 0) j = fuse_batch_norm_relu(code, i, du, p);
    return j >= 0 ? j : fuse_relu_batch_norm_backward(code, i, du, p);
  });
  return p;
}

}  // namespace fg::plan
