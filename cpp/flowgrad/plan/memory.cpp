// The memory planner: the first and last instruction touching each buffer, then offsets in one
// arena so that buffers whose lifetimes overlap never share bytes (greedy, largest first, each
// in the lowest gap left by the buffers already placed that live at the same time).
#include <algorithm>

#include "flowgrad/core/env.h"
#include "flowgrad/ops/kernel_args.h"
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

void Plan::plan_memory() {
  const int end = static_cast<int>(code_.size());
  for (Buffer& b : buffers_) b.first = b.last = -2;
  auto touch = [&](int id, int at) {
    Buffer& b = buffers_[id];
    b.first = b.first == -2 ? at : std::min(b.first, at);
    b.last = std::max(b.last, at);
  };
  for (const Value& v : inputs_) touch(v.buffer, -1);
  for (int i = 0; i < end; ++i) {
    // A fused run interleaves its instructions tile by tile: what it touches lives through all of it.
    int first = code_[i].run < 0 ? i : runs_[code_[i].run].first, last = code_[i].run < 0 ? i : runs_[code_[i].run].last;
    for (const auto* values : {&code_[i].in, &code_[i].out})
      for (const Value& v : *values) touch(v.buffer, first), touch(v.buffer, last);
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
    if (in_arena(b) && b.kind == BufferKind::Arena && b.last >= 0 && b.last < end) code_[b.last].released.push_back(id);
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
