// Folding passes (passes.h): constants, and transposed copies of matmul results, in every block.
#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

// Calls of `code` and of its blocks, in program order, whose inputs are all constants become
// constant buffers. A region's results are never folded: a block that did not run leaves them
// zero or unchanged, which a constant cannot express.
struct ConstantFolder {
  Program& p;
  const DefUse du;
  std::vector<bool> owned;

  bool foldable(const Instr& ins) const {
    bool ok = ins.kind == InstrKind::Call && !(ins.op->in(Group::Random) || mutates_inputs(*ins.op));
    for (const Value& v : ins.in) ok = ok && p.buffers[v.buffer].constant;
    for (const Value& v : ins.out)
      ok = ok && du.writers[v.buffer] == 1 && p.buffers[v.buffer].kind == BufferKind::Arena && !owned[v.buffer];
    return ok;
  }

  void fold(Block& code) {
    Block kept;
    for (Instr& ins : code) {
      for (Block& b : ins.blocks) fold(b);
      if (!foldable(ins)) {
        kept.push_back(std::move(ins));
        continue;
      }
      for (const Value& v : ins.out) {
        BufferDecl& b = p.buffers[v.buffer];
        b.kind = BufferKind::External;
        b.constant = true;
        b.name = "const" + std::to_string(v.buffer);
      }
    }
    code = std::move(kept);
  }
};

}  // namespace

Program fold_constants(Program p) {
  ConstantFolder folder{p, def_use(p), std::vector<bool>(p.buffers.size(), false)};
  walk(p.body, [&](const Instr& ins, int) {
    for (int id : ins.region.owned) folder.owned[id] = true;
  });
  folder.fold(p.body);
  return p;
}

namespace {

Value transposed(Value v) {
  std::swap(v.shape[0], v.shape[1]);
  std::swap(v.strides[0], v.strides[1]);
  return v;
}

// The matmul of `code` that `copy` copies out transposed (its only reader), else null.
Instr* transposed_product(Block& code, const Instr& copy, const std::vector<int>& producer, const DefUse& du) {
  if (!is_call(copy, OpId::contiguous) || copy.in[0].shape.size() != 2) return nullptr;
  const Value& v = copy.in[0];
  const int m = producer[v.buffer];
  Instr* mm = m >= 0 && du.readers[v.buffer] == 1 && is_call(code[m], OpId::matmul) ? &code[m] : nullptr;
  const Value* r = mm ? &mm->out[0] : nullptr;
  bool is_transpose = r && r->shape.size() == 2 && v.offset == r->offset && v.shape == transposed(*r).shape &&
                      v.strides == transposed(*r).strides && r->strides == contiguous_strides(r->shape) &&
                      mm->in[0].shape.size() == 2 && mm->in[1].shape.size() == 2;
  return is_transpose ? mm : nullptr;
}

// Within one block (a matmul and its copy are folded when both are in it), then in its blocks.
void fold_transposes_in(Block& code, size_t buffers, const DefUse& du) {
  std::vector<int> producer(buffers, -1);
  std::vector<bool> drop(code.size(), false);
  for (size_t i = 0; i < code.size(); ++i) {
    if (Instr* mm = transposed_product(code, code[i], producer, du)) {
      mm->in = {transposed(mm->in[1]), transposed(mm->in[0])};
      mm->out = code[i].out;
      drop[i] = true;
    }
    writes_deep(code[i], [&](const Value& v) { producer[v.buffer] = static_cast<int>(i); });
  }
  erase_marked(code, drop);
  for (Instr& ins : code)
    for (Block& b : ins.blocks) fold_transposes_in(b, buffers, du);
}

}  // namespace

Program fold_transposes(Program p) {
  const DefUse du = def_use(p);
  fold_transposes_in(p.body, p.buffers.size(), du);
  return p;
}

}  // namespace fg::plan
