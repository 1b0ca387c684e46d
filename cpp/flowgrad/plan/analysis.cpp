// The def/use analysis (analysis.h) and the per-kind rules it walks by.
#include "flowgrad/plan/analysis.h"

#include <algorithm>

namespace fg::plan {
namespace {

void none(const Instr&, const Visit&) {}

void call_reads(const Instr& ins, const Visit& fn) {
  for (const Value& v : ins.in) fn(v);
}
void call_writes(const Instr& ins, const Visit& fn) {
  for (const Value& v : ins.out) fn(v);
  for (size_t k = 0; k < ins.in.size(); ++k)  // in place, optimizer updates
    if (writes_input(*ins.op, k)) fn(ins.in[k]);
}
void each(const Visit& fn, std::initializer_list<const Value*> values) {
  for (const Value* v : values)
    if (v->buffer >= 0) fn(*v);
}
void switch_reads(const Instr& ins, const Visit& fn) { each(fn, {&ins.region.selector}); }
void loop_reads(const Instr& ins, const Visit& fn) {
  const Region& r = ins.region;
  each(fn, {&r.init, &r.selector, &r.carried});
}
void loop_writes(const Instr& ins, const Visit& fn) {
  const Region& r = ins.region;
  each(fn, {&r.carried, &r.stash, &r.count, &r.iteration});
}
void backward_reads(const Instr& ins, const Visit& fn) {
  const Region& r = ins.region;
  each(fn, {&r.init, &r.count, &r.stash});
}
void backward_writes(const Instr& ins, const Visit& fn) {
  const Region& r = ins.region;
  each(fn, {&r.carried, &r.step_input, &r.iteration});
  for (const Value& v : r.zeroed) fn(v);
}

const KindRule kRules[] = {
    {"call", call_reads, call_writes, false, false},
    {"fused", none, none, true, false},
    {"switch", switch_reads, none, false, true},
    {"while", loop_reads, loop_writes, true, true},
    {"until", loop_reads, loop_writes, true, true},
    {"loop_backward", backward_reads, backward_writes, true, true},
    {"guard", none, none, false, true},
};

}  // namespace

const KindRule& rule(InstrKind kind) { return kRules[static_cast<int>(kind)]; }
const char* kind_name(InstrKind kind) { return rule(kind).name; }

void reads_deep(const Instr& ins, const Visit& fn) {
  rule(ins.kind).reads(ins, fn);
  for (const Block& b : ins.blocks)
    for (const Instr& inner : b) reads_deep(inner, fn);
}
void writes_deep(const Instr& ins, const Visit& fn) {
  rule(ins.kind).writes(ins, fn);
  for (const Block& b : ins.blocks)
    for (const Instr& inner : b) writes_deep(inner, fn);
}

DefUse def_use(const Program& p) {
  const size_t n = p.buffers.size();
  DefUse du{std::vector<int>(n, 0), std::vector<int>(n, 0), std::vector<int>(n, -2), std::vector<int>(n, -2)};
  auto touch = [&](int id, int at) {
    du.first[id] = du.first[id] == -2 ? at : std::min(du.first[id], at);
    du.last[id] = std::max(du.last[id], at);
  };
  int time = 0;
  auto visit = [&](auto& self, const Block& block) -> void {
    for (const Instr& ins : block) {
      const int entry = time++;
      const KindRule& r = rule(ins.kind);
      r.reads(ins, [&](const Value& v) { ++du.readers[v.buffer], touch(v.buffer, entry); });
      r.writes(ins, [&](const Value& v) { ++du.writers[v.buffer], touch(v.buffer, entry); });
      if (ins.blocks.empty()) continue;
      for (const Block& b : ins.blocks) self(self, b);
      const int exit = time++;
      auto at_exit = [&](const Value& v) { touch(v.buffer, exit); };
      r.reads(ins, at_exit);
      r.writes(ins, at_exit);
      if (!r.spans) continue;
      for (size_t id = 0; id < n; ++id)
        if (du.first[id] != -2 && du.first[id] <= exit && du.last[id] >= entry)
          du.first[id] = std::min(du.first[id], entry), du.last[id] = std::max(du.last[id], exit);
    }
  };
  for (const Value& v : p.inputs) touch(v.buffer, -1);
  visit(visit, p.body);
  du.end = time;
  for (const Value& v : p.outputs) touch(v.buffer, du.end), ++du.readers[v.buffer];
  return du;
}

std::vector<Value*> region_values(Region& r) {
  std::vector<Value*> out;
  for (Value* v : {&r.selector, &r.init, &r.carried, &r.stash, &r.count, &r.step_input, &r.iteration})
    if (v->buffer >= 0) out.push_back(v);
  for (Value& v : r.zeroed) out.push_back(&v);
  return out;
}
std::vector<const Value*> region_values(const Region& r) {
  std::vector<const Value*> out;
  for (Value* v : region_values(const_cast<Region&>(r))) out.push_back(v);
  return out;
}

int64_t count_calls(const Block& block) {
  int64_t n = 0;
  for (const Instr& ins : block) n += ins.kind == InstrKind::Fused ? count_calls(ins.blocks[0]) : 1;
  for (const Instr& ins : block)
    if (is_region(ins.kind))
      for (const Block& b : ins.blocks) n += count_calls(b);
  return n;
}

int64_t count_kernels(const Block& block) {
  int64_t n = 0;
  for (const Instr& ins : block) {
    n += 1;
    if (is_region(ins.kind))
      for (const Block& b : ins.blocks) n += count_kernels(b);
  }
  return n;
}

}  // namespace fg::plan
