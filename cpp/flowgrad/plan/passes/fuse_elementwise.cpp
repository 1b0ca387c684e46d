// Elementwise fusion (passes.h): a run of consecutive elementwise calls that write the same shape
// becomes one Fused instruction whose block is the chain. It executes tile by tile (fusion.cpp),
// a tile being a range of rows, a row what is left of the shape after its leading `split` dims.
// Each operand either spans those leading dims (its tile is a slice) or is broadcast over all of
// them (a bias row, a scalar), so a bias add joins the run instead of ending it. Elementwise ops
// write element i from element i of their broadcast inputs, so running them tile by tile is
// exact as long as no call reads a value the run writes through another layout; such a read
// ends the run.
#include <algorithm>

#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

constexpr int64_t kMinFused = 1 << 13;  // CPU: shorter buffers gain nothing from tiling

bool whole(const Value& v, const BufferDecl& b, const Dims& shape) {
  return v.offset == 0 && v.shape == shape && v.strides == contiguous_strides(shape) &&
         static_cast<size_t>(shape.numel()) * itemsize(v.dtype) == b.bytes;
}

}  // namespace

int spanned_dims(const Value& v, const Dims& shape) {
  if (v.shape.size() != shape.size()) return 0;
  int k = 0;
  while (k < shape.size() && v.shape[k] == shape[k] && (k == 0 || v.strides[k - 1] == v.strides[k] * v.shape[k])) ++k;
  return k;
}

int broadcast_dims(const Value& v, const Dims& shape) {
  int lead = shape.size() - v.shape.size(), k = 0;
  while (k < shape.size() && (k < lead || v.shape[k - lead] == 1)) ++k;
  return k;
}

namespace {

// How many leading dims of `shape` the call can be tiled over (0: it cannot join a run writing `shape`).
int fusable_split(const Program& p, const Instr& ins, const Dims& shape) {
  if (ins.kind != InstrKind::Call || !ins.op->in(Group::Elementwise) || ins.out.size() != 1 || shape.size() == 0 ||
      shape.numel() == 0)
    return 0;
  const BufferDecl& b = p.buffers[ins.out[0].buffer];
  if ((p.device.is_cpu() && shape.numel() < kMinFused) || b.kind != BufferKind::Arena || !whole(ins.out[0], b, shape))
    return 0;
  int split = shape.size();
  for (const Value& v : ins.in) split = std::min(split, std::max(spanned_dims(v, shape), broadcast_dims(v, shape)));
  return split;
}

// Runs within `code`, then within the blocks of its regions.
void fuse_block(const Program& p, Block& code) {
  Block out;
  for (size_t i = 0; i < code.size();) {
    for (Block& b : code[i].blocks) fuse_block(p, b);
    const Dims shape = code[i].out.empty() ? Dims{} : code[i].out[0].shape;
    int split = fusable_split(p, code[i], shape);
    std::vector<bool> written(p.buffers.size(), false), read(p.buffers.size(), false);
    auto join = [&](const Instr& ins) {
      for (const Value& v : ins.in) read[v.buffer] = true;
      written[ins.out[0].buffer] = true;
    };
    if (split > 0) join(code[i]);
    size_t j = i;
    while (split > 0 && j + 1 < code.size()) {
      const Instr& next = code[j + 1];
      int s = fusable_split(p, next, shape);
      bool exact = s > 0 && !read[next.out[0].buffer];
      for (const Value& v : next.in) exact = exact && (!written[v.buffer] || whole(v, p.buffers[v.buffer], shape));
      if (!exact) break;
      split = std::min(split, s);
      join(next);
      ++j;
    }
    if (split == 0 || j == i) {
      out.push_back(std::move(code[i++]));
      continue;
    }
    Instr run{nullptr, {}, {}, {}, code[i].phase, code[i].origin, InstrKind::Fused};
    run.split = split;
    run.blocks.emplace_back(std::make_move_iterator(code.begin() + i), std::make_move_iterator(code.begin() + j + 1));
    out.push_back(std::move(run));
    i = j + 1;
  }
  code = std::move(out);
}

}  // namespace

Program fuse_elementwise(Program p) {
  fuse_block(p, p.body);
  return p;
}

}  // namespace fg::plan
