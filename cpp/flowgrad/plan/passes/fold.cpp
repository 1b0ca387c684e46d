// Folding passes (passes.h): constants, and transposed copies of matmul results.
#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {

Program fold_constants(Program p) {
  const DefUse du = def_use(p);
  Block kept;
  for (Instr& ins : p.body) {
    bool foldable = ins.kind == InstrKind::Call && !(ins.op->in(Group::Random) || mutates_inputs(*ins.op));
    for (const Value& v : ins.in) foldable = foldable && p.buffers[v.buffer].constant;
    for (const Value& v : ins.out)
      foldable = foldable && du.writers[v.buffer] == 1 && p.buffers[v.buffer].kind == BufferKind::Arena;
    if (!foldable) {
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
  p.body = std::move(kept);
  return p;
}

namespace {

Value transposed(Value v) {
  std::swap(v.shape[0], v.shape[1]);
  std::swap(v.strides[0], v.strides[1]);
  return v;
}

bool is_call(const Instr& ins, OpId op) { return ins.kind == InstrKind::Call && ins.op->id == op; }

}  // namespace

Program fold_transposes(Program p) {
  const DefUse du = def_use(p);
  Block& code = p.body;
  std::vector<int> producer(p.buffers.size(), -1);
  std::vector<bool> drop(code.size(), false);
  for (size_t i = 0; i < code.size(); ++i) {
    Instr& copy = code[i];
    if (is_call(copy, OpId::contiguous) && copy.in[0].shape.size() == 2) {
      const Value& v = copy.in[0];
      const int m = producer[v.buffer];
      Instr* mm = m >= 0 && du.readers[v.buffer] == 1 && is_call(code[m], OpId::matmul) ? &code[m] : nullptr;
      const Value* r = mm ? &mm->out[0] : nullptr;
      bool is_transpose = r && r->shape.size() == 2 && v.offset == r->offset && v.shape == transposed(*r).shape &&
                          v.strides == transposed(*r).strides && r->strides == contiguous_strides(r->shape) &&
                          mm->in[0].shape.size() == 2 && mm->in[1].shape.size() == 2;
      if (is_transpose) {
        mm->in = {transposed(mm->in[1]), transposed(mm->in[0])};
        mm->out = copy.out;
        drop[i] = true;
      }
    }
    writes_deep(code[i], [&](const Value& v) { producer[v.buffer] = static_cast<int>(i); });
  }
  Block kept;
  for (size_t i = 0; i < code.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(code[i]));
  p.body = std::move(kept);
  return p;
}

}  // namespace fg::plan
