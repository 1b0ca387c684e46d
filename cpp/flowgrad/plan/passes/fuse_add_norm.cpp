// Residual-norm fusion (passes.h). A pre-norm transformer adds a residual and normalises the sum
// (s = x + r; y = layer_norm(s)): one add_layer_norm call writes both while each row is in
// cache. Its backward adds the norm's input gradient to the residual's (add(norm_backward dx, g)):
// norm_backward accumulates g into dx in the same pass. Each fused call takes the place of the
// first call and the second goes: exact when the second's other inputs are not written between
// the two and the first's result (the sum, or dx) is written nowhere else.
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

}  // namespace

Program fuse_add_norm(Program p) {
  const DefUse du = def_use(p);
  absorb_pairs(p.body, [&](Block& code, size_t i) {
    int j = fuse_forward(code, i, du);
    return j >= 0 ? j : fuse_backward(code, i, du, p);
  });
  return p;
}

}  // namespace fg::plan
