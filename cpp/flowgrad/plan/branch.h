// Helpers over branch instructions, shared by the builder, the memory planner and the executor
// (branch.cpp).
#pragma once
#include <vector>

#include "flowgrad/plan/plan.h"

namespace fg::plan {

// The stand-in OpDef of a branch instruction: named after its kind, mutating (never dropped,
// merged, folded or fused).
const OpDef& branch_op(BranchKind kind);
bool is_loop(BranchKind kind);
// The branch's own values (selector, loop state, accumulators) that are set.
std::vector<Value*> branch_values(Branch& b);
// Every instruction of code and, recursively, of its branches' blocks.
template <class Code, class Fn>
void for_each_instruction(Code& code, const Fn& fn) {
  for (auto& ins : code) {
    fn(ins);
    if (ins.branch)
      for (auto& block : ins.branch->blocks) for_each_instruction(block, fn);
  }
}
void rename_in_branch(Branch& b, const std::vector<int>& rename);
// Wraps each optimizer update whose gradient only some branch blocks compute in a Guard branch,
// so that, as in eager mode (a parameter without .grad is skipped), it runs only when one of
// them ran.
void guard_updates(std::vector<Instruction>& code, std::vector<std::shared_ptr<Branch>>& branches, size_t buffers);

}  // namespace fg::plan
