// One def/use analysis of a Program that every pass and the memory planner share. What an
// instruction touches itself comes from a rule per kind (as JAX's dce_rules): a call reads its
// inputs and writes its outputs and the inputs its op writes; a region reads and writes its own
// state (selector, loop state) and its blocks are walked as instructions of their own.
#pragma once
#include <functional>
#include <vector>

#include "flowgrad/plan/program.h"

namespace fg::plan {

using Visit = std::function<void(const Value&)>;

struct KindRule {
  const char* name;
  void (*reads)(const Instr&, const Visit&);   // values the instruction itself reads
  void (*writes)(const Instr&, const Visit&);  // values the instruction itself writes
  bool spans;        // what its blocks touch lives through all of it (loops repeat; fused runs interleave tiles)
  bool conditional;  // its blocks may not run (a block's values are not defined after it)
};
const KindRule& rule(InstrKind kind);

// Every value an instruction touches, its blocks' instructions included.
void reads_deep(const Instr& ins, const Visit& fn);
void writes_deep(const Instr& ins, const Visit& fn);

// Times: instructions get one each in program order (blocks after their instruction); an
// instruction with blocks gets a second, its exit, after them. Inputs are touched at -1 and
// outputs at `end`.
struct DefUse {
  std::vector<int> writers, readers;  // per buffer: instructions (at any depth) that write / read it
  std::vector<int> first, last;       // per buffer: first and last time touched (-2: never)
  int end = 0;                        // one past the last time
  bool written(int buffer) const { return writers[buffer] > 0; }
};
DefUse def_use(const Program& p);

}  // namespace fg::plan
