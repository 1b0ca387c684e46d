// The memory planner: the first and last instruction touching each buffer, then offsets in one
// arena so that buffers whose lifetimes overlap never share bytes (greedy, largest first, each
// in the lowest gap left by the buffers already placed that live at the same time).
#include <algorithm>

#include "flowgrad/core/env.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/plan/branch.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

constexpr int64_t kAlign = 64;

int64_t aligned(size_t bytes) { return (static_cast<int64_t>(bytes) + kAlign - 1) / kAlign * kAlign; }

// An input is copied into its slot at the start of every run, so it has bytes of its own even
// when no instruction reads it (else it would land on offset 0, over a live buffer).
bool in_arena(const Buffer& b) {
  return b.kind != BufferKind::External && !b.local && b.last >= b.first && (b.last >= 0 || b.kind == BufferKind::Input);
}

bool overlap_in_time(const Buffer& a, const Buffer& b) { return a.first <= b.last && b.first <= a.last; }

bool overlap_in_bytes(const Buffer& a, const Buffer& b) {
  return a.offset < b.offset + aligned(b.bytes) && b.offset < a.offset + aligned(a.bytes);
}

}  // namespace

// Times: one per instruction; a branch instruction has an entry and an exit time around its
// blocks' instructions, which follow one another (one block runs, or a loop repeats them). A
// buffer touched inside a loop lives through the whole loop.
void Plan::plan_memory() {
  for (Buffer& b : buffers_) b.first = b.last = -2;
  auto touch = [&](int id, int at) {
    Buffer& b = buffers_[id];
    b.first = b.first == -2 ? at : std::min(b.first, at);
    b.last = std::max(b.last, at);
  };
  std::vector<Instruction*> at;  // time -> the instruction after which a buffer dying then is released
  auto walk = [&](auto& self, std::vector<Instruction>& code) -> void {
    for (Instruction& ins : code) {
      const int entry = static_cast<int>(at.size());
      at.push_back(&ins);
      auto touch_own = [&](int when) {
        for (const auto* values : {&ins.in, &ins.out})
          for (const Value& v : *values) touch(v.buffer, when);
        if (ins.branch)
          for (Value* v : branch_values(*ins.branch)) touch(v->buffer, when);
      };
      touch_own(entry);
      if (!ins.branch) continue;
      for (auto& block : ins.branch->blocks) self(self, block);
      const int exit = static_cast<int>(at.size());
      at.push_back(&ins);
      touch_own(exit);
      if (!is_loop(ins.branch->kind)) continue;
      for (Buffer& b : buffers_)
        if (b.first != -2 && b.first <= exit && b.last >= entry) b.first = std::min(b.first, entry), b.last = std::max(b.last, exit);
    }
  };
  for (const Value& v : inputs_) touch(v.buffer, -1);
  walk(walk, code_);
  const int end = static_cast<int>(at.size());
  // A fused run (top-level code only) interleaves its instructions tile by tile: what it touches
  // lives through all of it.
  std::vector<int> time_of;  // top-level instruction -> its time
  for (int t = 0; t < end; ++t)
    if (at[t] >= code_.data() && at[t] < code_.data() + code_.size() &&
        (time_of.empty() || at[t] != &code_[time_of.size() - 1]))
      time_of.push_back(t);
  for (size_t i = 0; i < code_.size(); ++i) {
    if (code_[i].run < 0) continue;
    const FusedRun& run = runs_[code_[i].run];
    for (const auto* values : {&code_[i].in, &code_[i].out})
      for (const Value& v : *values) touch(v.buffer, time_of[run.first]), touch(v.buffer, time_of[run.last]);
  }
  for (const Value& v : outputs_) touch(v.buffer, end);

  std::vector<int> order;
  for (int id = 0; id < static_cast<int>(buffers_.size()); ++id)
    if (in_arena(buffers_[id])) order.push_back(id);
  stats_.naive_bytes = 0;
  for (int id : order) stats_.naive_bytes += aligned(buffers_[id].bytes);

  if (!env::plan_planner()) {  // FLOWGRAD_NO_PLANNER: every buffer its own bytes
    int64_t at = 0;
    for (int id : order) buffers_[id].offset = at, at += aligned(buffers_[id].bytes);
    stats_.arena_bytes = at;
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return buffers_[a].bytes > buffers_[b].bytes; });
    std::vector<int> placed;
    int64_t top = 0;
    for (int id : order) {
      Buffer& b = buffers_[id];
      std::vector<std::pair<int64_t, int64_t>> busy;  // byte ranges of buffers alive at the same time
      for (int other : placed)
        if (overlap_in_time(b, buffers_[other]))
          busy.emplace_back(buffers_[other].offset, buffers_[other].offset + aligned(buffers_[other].bytes));
      std::sort(busy.begin(), busy.end());
      int64_t at = 0;
      for (const auto& [lo, hi] : busy) {
        if (at + aligned(b.bytes) <= lo) break;
        at = std::max(at, hi);
      }
      b.offset = at;
      top = std::max(top, at + aligned(b.bytes));
      placed.push_back(id);
    }
    stats_.arena_bytes = top;
  }
  for (int id = 0; id < static_cast<int>(buffers_.size()); ++id) {
    const Buffer& b = buffers_[id];
    if (in_arena(b) && b.kind == BufferKind::Arena && b.last >= 0 && b.last < end) at[b.last]->released.push_back(id);
  }
}

void Plan::check_memory() const {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (!in_arena(buffers_[i])) continue;
    for (size_t j = i + 1; j < buffers_.size(); ++j) {
      if (!in_arena(buffers_[j]) || !overlap_in_time(buffers_[i], buffers_[j])) continue;
      FG_CHECK(!overlap_in_bytes(buffers_[i], buffers_[j]) || buffers_[i].bytes == 0 || buffers_[j].bytes == 0, Runtime,
               "compile: internal error: buffers ", buffers_[i].name, " and ", buffers_[j].name,
               " are alive at the same time and share arena bytes");
    }
  }
}

}  // namespace fg::plan
