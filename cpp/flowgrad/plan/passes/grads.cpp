// Gradient passes (passes.h): binding declared gradients to target buffers, and guarding the
// optimizer updates of gradients only some branch blocks compute.
#include <algorithm>
#include <unordered_set>

#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {

Program bind_grads(Program p) {
  std::unordered_set<int> forwarded;
  for (GradDecl& g : p.grads) {
    const int id = g.grad.buffer;
    const BufferDecl& b = p.buffers[id];
    const bool whole = g.grad.offset == 0 && g.grad.strides == contiguous_strides(g.grad.shape) &&
                       static_cast<size_t>(g.grad.shape.numel()) * itemsize(g.grad.dtype) == b.bytes;
    if (b.kind == BufferKind::Arena && whole && g.grad.dtype == g.dtype && !forwarded.count(id)) {
      p.buffers[id].kind = BufferKind::External;  // the producing call writes .grad directly
      p.buffers[id].name = "grad(" + g.name + ")";
      forwarded.insert(id);
      g.target = id;
      continue;
    }
    FG_CHECK(g.grad.dtype == g.dtype, DType, "compile: the gradient of ", g.name, " is ", dtype_name(g.grad.dtype),
             ", the parameter ", dtype_name(g.dtype));
    const size_t bytes = static_cast<size_t>(g.shape.numel()) * itemsize(g.dtype);
    g.target = p.add_buffer({BufferKind::External, "grad(" + g.name + ")", bytes, b.device, g.dtype});
    Value target{g.target, 0, g.shape, contiguous_strides(g.shape), g.dtype};
    Instr copy{&op_def(OpId::contiguous), {}, {g.grad}, {target}};
    copy.phase = Phase::Update;
    p.body.push_back(std::move(copy));  // a view, a shared or converted gradient: one copy at the end
  }
  return p;
}

namespace {

using Pairs = std::vector<std::pair<int, int>>;  // (region, block)

// Per buffer: the (region, block) pairs that write it, and whether it may be missing.
struct Presence {
  std::vector<Pairs> when;
  std::vector<bool> conditional;

  void region_wrote(const Instr& ins) {
    const Region& r = ins.region;
    for (size_t k = 0; k < r.present.size() && k < r.owned.size(); ++k) {
      const int id = r.owned[k];
      Pairs pairs;
      bool zeroed = std::any_of(r.zeroed.begin(), r.zeroed.end(), [&](const Value& v) { return v.buffer == id; });
      if (ins.kind == InstrKind::Switch && r.present[k].size() < ins.blocks.size())
        for (int block : r.present[k]) pairs.emplace_back(r.id, block);
      if (ins.kind == InstrKind::LoopBackward && zeroed) pairs.emplace_back(r.id, 0);
      conditional[id] = !pairs.empty() || (ins.kind == InstrKind::Switch && r.present[k].empty());
      when[id] = std::move(pairs);
    }
  }
  // A sum or a copy of gradients exists when any part does; anything else computed from a gradient
  // only a branch computes (a clipped gradient g * scale, a gradient further back) exists when it does.
  bool depends(const Instr& ins, Pairs& pairs, bool all) const {
    bool cond = all;
    for (size_t i = 0; i < ins.in.size(); ++i) {
      if (!all && writes_input(*ins.op, i)) continue;
      const int id = ins.in[i].buffer;
      cond = all ? cond && conditional[id] : cond || conditional[id];
      if (all || conditional[id]) pairs.insert(pairs.end(), when[id].begin(), when[id].end());
    }
    return cond;
  }
};

bool sums_gradients(const Instr& ins) {
  const OpId op = ins.op->id;
  return op == OpId::add || op == OpId::contiguous || op == OpId::copy_ || op == OpId::cast;
}

}  // namespace

// An update unit is one parameter's update: the calls of its update scope (a composed optimizer's
// in-place ops), or one optimizer op outside any. A unit that reads a gradient only some branch
// blocks compute runs as a whole or not at all, as eager mode skips a parameter without .grad.
Program guard_updates(Program p) {
  if (p.regions == 0) return p;
  Presence s{std::vector<Pairs>(p.buffers.size()), std::vector<bool>(p.buffers.size(), false)};
  Block out;
  for (size_t i = 0; i < p.body.size();) {
    Instr& ins = p.body[i];
    if (is_region(ins.kind)) {
      s.region_wrote(ins);
      out.push_back(std::move(p.body[i++]));
      continue;
    }
    size_t end = i + 1;
    while (ins.scope >= 0 && end < p.body.size() && p.body[end].scope == ins.scope) ++end;
    const bool unit = ins.scope >= 0 || (ins.kind == InstrKind::Call && ins.op->family == Family::Optim);
    Pairs pairs;
    bool cond = false;
    for (size_t k = i; unit && k < end; ++k) cond |= p.body[k].kind == InstrKind::Call && s.depends(p.body[k], pairs, false);
    if (cond) {
      Instr guard{nullptr, {}, {}, {}, ins.phase, ins.origin, InstrKind::Guard};
      guard.region.id = p.regions++;
      guard.region.label = std::string("update of ") + (ins.scope >= 0 ? "a parameter" : ins.op->name);
      guard.region.guard = std::move(pairs);
      guard.blocks.emplace_back();
      for (size_t k = i; k < end; ++k) guard.blocks[0].push_back(std::move(p.body[k]));
      out.push_back(std::move(guard));
      i = end;
      continue;
    }
    for (; i < end; ++i) {
      Instr& call = p.body[i];
      Pairs from;
      const bool derived = call.kind == InstrKind::Call && s.depends(call, from, sums_gradients(call));
      for (const Value& v : call.out) s.conditional[v.buffer] = derived, s.when[v.buffer] = derived ? from : Pairs{};
      out.push_back(std::move(call));
    }
  }
  p.body = std::move(out);
  return p;
}

}  // namespace fg::plan
