// Common-subexpression elimination (passes.h). Keys name the op, its attributes and each input's
// buffer, version and layout; a buffer's version moves whenever something writes it, so a key
// never matches across a write. A block starts from the keys of what ran before its region and
// its own keys end with it; a loop's writes move versions before its blocks are read, since a
// later iteration sees them.
#include <sstream>
#include <unordered_map>

#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

struct Made {
  std::vector<Value> out;
  Phase phase;
  int scope;  // a guard may skip one parameter's update: no other reuses what it made
};
using Seen = std::unordered_map<std::string, Made>;

struct Cse {
  Program& p;
  DefUse du;
  std::vector<int> rename{}, version{};
  int time = 0;

  void rename_values(std::vector<Value>& values) {
    for (Value& v : values) v.buffer = rename[v.buffer];
  }
  void bump_written(const Instr& ins) {
    writes_deep(ins, [&](const Value& v) { ++version[v.buffer]; });
  }
  std::string key(const Instr& ins) const {
    std::ostringstream key;
    key << ins.op << '|' << ins.attrs.str();
    for (const Value& v : ins.in)
      key << '|' << v.buffer << '@' << version[v.buffer] << ':' << v.offset << to_string(v.shape)
          << to_string(v.strides) << static_cast<int>(v.dtype);
    return key.str();
  }
  bool pure(const Instr& ins) const {
    bool pure = ins.kind == InstrKind::Call && !ins.op->in(Group::Random) && !mutates_inputs(*ins.op);
    for (const Value& v : ins.out)
      pure = pure && du.writers[v.buffer] == 1 && p.buffers[v.buffer].kind == BufferKind::Arena;
    return pure;
  }

  // True when `ins` (at time `now`) can take the results of `first` instead.
  bool reuse(const Instr& ins, const Made& first, int now) {
    if (first.scope >= 0 && first.scope != ins.scope) return false;
    bool across = ins.phase != Phase::Forward && first.phase == Phase::Forward;
    for (size_t k = 0; across && k < ins.out.size(); ++k)
      if (du.last[first.out[k].buffer] < now) return false;
    for (size_t k = 0; k < ins.out.size(); ++k) {
      rename[ins.out[k].buffer] = first.out[k].buffer;
      du.last[first.out[k].buffer] = std::max(du.last[first.out[k].buffer], du.last[ins.out[k].buffer]);
    }
    return true;
  }

  Block block(Block code, Seen seen) {
    Block kept;
    for (Instr& ins : code) {
      const int now = time++;
      rename_values(ins.in);
      for (Value* v : region_values(ins.region)) v->buffer = rename[v->buffer];
      if (!ins.blocks.empty()) {
        if (rule(ins.kind).spans) bump_written(ins);
        for (Block& b : ins.blocks) b = block(std::move(b), seen);
        ++time;  // the exit
        bump_written(ins);
        kept.push_back(std::move(ins));
        continue;
      }
      const bool is_pure = pure(ins);
      const std::string k = is_pure ? key(ins) : std::string();
      auto found = is_pure ? seen.find(k) : seen.end();
      if (found != seen.end() && reuse(ins, found->second, now)) continue;
      bump_written(ins);
      if (is_pure) seen[k] = {ins.out, ins.phase, ins.scope};
      kept.push_back(std::move(ins));
    }
    return kept;
  }
};

}  // namespace

Program cse(Program p) {
  Cse c{p, def_use(p)};
  for (size_t i = 0; i < p.buffers.size(); ++i) c.rename.push_back(static_cast<int>(i));
  c.version.assign(p.buffers.size(), 0);
  p.body = c.block(std::move(p.body), {});
  c.rename_values(p.outputs);
  for (GradDecl& g : p.grads) g.grad.buffer = c.rename[g.grad.buffer];
  return p;
}

}  // namespace fg::plan
