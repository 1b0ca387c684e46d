// The memory plan of a Program (memory.cpp): lifetimes from the def/use analysis, then offsets in
// one arena so that buffers whose lifetimes overlap never share bytes. check_memory proves that
// from the program alone (its own analysis), so a planner bug cannot hide behind its own tables.
#pragma once
#include <cstdint>
#include <vector>

#include "flowgrad/plan/analysis.h"

namespace fg::plan {

struct MemoryPlan {
  std::vector<int64_t> offset;             // per buffer: bytes from the arena's start (in the arena only)
  std::vector<int> first, last;            // per buffer: lifetime in DefUse times (-2: never touched)
  std::vector<bool> local;                 // lives only inside one fused run: per-tile scratch, no arena bytes
  std::vector<std::vector<int>> released;  // per time: arena buffers whose last use it is
  std::vector<int> takes;                  // per buffer: the buffer whose bytes it takes, or -1 (in_place_pairs)
  size_t arena_bytes = 0, naive_bytes = 0;
  bool in_arena(const Program& p, int id) const;
};

// Per buffer: made and read only inside one fused run's chain (it stays in its tile scratch).
std::vector<bool> fused_locals(const Program& p, const DefUse& du);
// Results written over an operand that dies where they are made: per buffer, the operand buffer
// whose bytes it may take, or -1. On the CPU, an op's first output may take an operand's bytes
// where its kernel reads each value before writing the same place (the activation backwards with
// the bias gradient, <act>_backward_colsum and mul_colsum, over their gradient; norm_backward over
// x; add_layer_norm's sum over an addend); both whole, dense arena buffers of one size, the operand
// read by nothing later and as no other input, neither a result of the step.
std::vector<int> in_place_pairs(const Program& p, const DefUse& du);
// `reuse` false (FLOWGRAD_NO_PLANNER): every buffer gets its own bytes.
MemoryPlan plan_memory(const Program& p, const DefUse& du, bool reuse = true);
// Raises unless no two arena buffers alive at the same time share bytes.
void check_memory(const Program& p, const MemoryPlan& m);

}  // namespace fg::plan
