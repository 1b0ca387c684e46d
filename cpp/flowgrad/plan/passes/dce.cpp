// Dead-code elimination (passes.h), in every block: a reverse sweep drops what nobody reads (each
// drop releases its own reads, so chains go in one sweep), repeated until nothing changes (a read
// in a later block or an earlier loop iteration may have held a value).
#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

struct Dce {
  const Program& p;
  std::vector<int> readers;
  bool changed = false;

  // One rule for every kind (analysis.h's def/use rules): dead when nothing it or its blocks write
  // is read, and all of it is the plan's own memory. A region whose blocks emptied writes nothing.
  bool dead(const Instr& ins) const {
    bool dead = true;
    writes_deep(ins, [&](const Value& v) {
      dead = dead && readers[v.buffer] == 0 && p.buffers[v.buffer].kind == BufferKind::Arena;
    });
    return dead;
  }

  void sweep(Block& code) {
    std::vector<bool> drop(code.size(), false);
    for (size_t i = code.size(); i-- > 0;) {
      for (Block& b : code[i].blocks) sweep(b);
      if (!dead(code[i])) continue;
      reads_deep(code[i], [&](const Value& v) { --readers[v.buffer]; });
      drop[i] = changed = true;
    }
    erase_marked(code, drop);
  }
};

}  // namespace

Program dce(Program p) {
  Dce d{p, def_use(p).readers};
  do {
    d.changed = false;
    d.sweep(p.body);
  } while (d.changed);
  return p;
}

}  // namespace fg::plan
