// The memory planner (memory.h): greedy, largest first, each buffer in the lowest gap left by the
// buffers already placed that live at the same time.
#include "flowgrad/plan/memory.h"

#include <algorithm>

#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

constexpr int64_t kAlign = 64;

int64_t aligned(size_t bytes) { return (static_cast<int64_t>(bytes) + kAlign - 1) / kAlign * kAlign; }

bool overlap_in_time(const MemoryPlan& m, int a, int b) { return m.first[a] <= m.last[b] && m.first[b] <= m.last[a]; }

// Whether a CPU op's first output may be written over input k: its kernel reads each value of that
// input before writing the same place, and nothing of it after. The activation backwards with the
// bias gradient over their gradient (kernels/nn/fused_cpu.cpp: input 0); norm_backward over x
// (kernels/nn/nn_cpu.cpp: a row's x is summed, then each dx is written after its x is read; input
// 1); add_layer_norm's sum over either addend (add_row, then the row normalised from the sum).
bool written_over(OpId id, int k) {
  switch (id) {
    case OpId::mul_colsum: case OpId::relu_backward_colsum: case OpId::gelu_backward_colsum:
    case OpId::gelu_tanh_backward_colsum: case OpId::silu_backward_colsum: case OpId::tanh_backward_colsum:
    case OpId::sigmoid_backward_colsum: return k == 0;
    case OpId::norm_backward: return k == 1;
    case OpId::add_layer_norm: return k == 0 || k == 1;
    default: return false;
  }
}

bool whole_buffer(const Program& p, const Value& v) {
  return dense(v) && static_cast<size_t>(v.shape.numel()) * itemsize(v.dtype) == p.buffers[v.buffer].bytes;
}

}  // namespace

std::vector<int> in_place_pairs(const Program& p, const DefUse& du) {
  std::vector<int> takes(p.buffers.size(), -1);
  if (!p.device.is_cpu()) return takes;  // the CUDA kernels make no such promise
  auto arena = [&](int id) { return p.buffers[id].kind == BufferKind::Arena && !is_result(p, id); };
  walk(p.body, [&](const Instr& ins, int) {
    if (ins.kind != InstrKind::Call || ins.out.empty()) return;
    const Value& y = ins.out[0];
    for (int k = 0; k < static_cast<int>(ins.in.size()) && takes[y.buffer] < 0; ++k) {
      const Value& g = ins.in[k];
      const int from = g.buffer, to = y.buffer;
      bool fits = written_over(ins.op->id, k) && from != to && arena(from) && arena(to) && whole_buffer(p, g) &&
                  whole_buffer(p, y) && g.dtype == y.dtype && du.writers[to] == 1 &&
                  du.last[from] == du.first[to];  // the operand dies where the result is made
      for (const Value& v : ins.in) fits = fits && (&v == &g || v.buffer != from);  // read as input k only
      for (const Value& o : ins.out) fits = fits && o.buffer != from;
      if (fits) takes[to] = from;
    }
  });
  return takes;
}

std::vector<bool> fused_locals(const Program& p, const DefUse& du) {
  std::vector<bool> local(p.buffers.size(), false);
  std::vector<int> touched(p.buffers.size(), 0);
  walk(p.body, [&](const Instr& run, int) {
    if (run.kind != InstrKind::Fused) return;
    std::vector<int> mine;
    for (const Instr& ins : run.blocks[0]) {
      for (const Value& v : ins.in) ++touched[v.buffer], mine.push_back(v.buffer);
      ++touched[ins.out[0].buffer], mine.push_back(ins.out[0].buffer);
    }
    for (int id : mine) {
      local[id] = local[id] || (p.buffers[id].kind == BufferKind::Arena && du.writers[id] > 0 &&
                                touched[id] == du.readers[id] + du.writers[id]);
    }
    for (int id : mine) touched[id] = 0;
  });
  return local;
}

// An input is copied into its slot at the start of every run, so it has bytes of its own even
// when no instruction reads it (else it would land on offset 0, over a live buffer).
bool MemoryPlan::in_arena(const Program& p, int id) const {
  const BufferDecl& b = p.buffers[id];
  return b.kind != BufferKind::External && !local[id] && last[id] >= first[id] &&
         (last[id] >= 0 || b.kind == BufferKind::Input);
}

MemoryPlan plan_memory(const Program& p, const DefUse& du, bool reuse) {
  const int n = static_cast<int>(p.buffers.size());
  MemoryPlan m;
  m.offset.assign(n, 0);
  m.first = du.first, m.last = du.last;
  m.local = fused_locals(p, du);
  // A result written over a dying operand is placed with it: one group of buffers, living from the
  // first one's start to the last one's end, at one offset.
  m.takes = reuse ? in_place_pairs(p, du) : std::vector<int>(n, -1);
  std::vector<bool> taken(n, false);
  for (int id = 0; id < n; ++id) {
    if (m.takes[id] >= 0 && !(m.in_arena(p, id) && m.in_arena(p, m.takes[id]))) m.takes[id] = -1;
    if (m.takes[id] >= 0) taken[m.takes[id]] = true;
  }
  auto root = [&](int id) {
    while (m.takes[id] >= 0) id = m.takes[id];
    return id;
  };
  std::vector<int> group_last = m.last;  // per group root: the end of its last member's life
  for (int id = 0; id < n; ++id)
    if (m.takes[id] >= 0) group_last[root(id)] = std::max(group_last[root(id)], m.last[id]);
  auto alive_together = [&](int a, int b) { return m.first[a] <= group_last[b] && m.first[b] <= group_last[a]; };
  std::vector<int> order;
  for (int id = 0; id < n; ++id) {
    if (!m.in_arena(p, id)) continue;
    m.naive_bytes += aligned(p.buffers[id].bytes);
    if (m.takes[id] < 0) order.push_back(id);
  }
  if (reuse) std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p.buffers[a].bytes > p.buffers[b].bytes; });
  std::vector<int> placed;
  int64_t top = 0;
  for (int id : order) {
    const int64_t size = aligned(p.buffers[id].bytes);
    std::vector<std::pair<int64_t, int64_t>> busy;  // byte ranges of buffers alive at the same time
    for (int other : placed)
      if (!reuse || alive_together(id, other)) busy.emplace_back(m.offset[other], m.offset[other] + aligned(p.buffers[other].bytes));
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + size <= lo && reuse) break;
      at = std::max(at, hi);
    }
    m.offset[id] = at;
    top = std::max(top, at + size);
    placed.push_back(id);
  }
  m.arena_bytes = static_cast<size_t>(top);
  for (int id = 0; id < n; ++id)
    if (m.takes[id] >= 0) m.offset[id] = m.offset[root(id)];
  m.released.resize(du.end);
  for (int id = 0; id < n; ++id)  // a taken buffer's bytes live on in the one that took them
    if (m.in_arena(p, id) && p.buffers[id].kind == BufferKind::Arena && !taken[id] && m.last[id] >= 0 &&
        m.last[id] < du.end)
      m.released[m.last[id]].push_back(id);
  return m;
}

void check_memory(const Program& p, const MemoryPlan& m) {
  const DefUse du = def_use(p);  // lifetimes of its own, not the planner's
  MemoryPlan proof = m;
  proof.first = du.first, proof.last = du.last;
  auto bytes = [&](int id) { return std::pair{m.offset[id], m.offset[id] + aligned(p.buffers[id].bytes)}; };
  const int n = static_cast<int>(p.buffers.size());
  const std::vector<int> takes = in_place_pairs(p, du);  // allowed to meet: a result over its dying operand
  for (int i = 0; i < n; ++i) {
    if (!proof.in_arena(p, i) || p.buffers[i].bytes == 0) continue;
    for (int j = i + 1; j < n; ++j) {
      if (!proof.in_arena(p, j) || p.buffers[j].bytes == 0 || !overlap_in_time(proof, i, j)) continue;
      if ((takes[i] == j || takes[j] == i) && m.offset[i] == m.offset[j]) continue;
      FG_CHECK(bytes(i).first >= bytes(j).second || bytes(j).first >= bytes(i).second, Runtime,
               "compile: internal error: buffers ", p.buffers[i].name, " and ", p.buffers[j].name,
               " are alive at the same time and share arena bytes");
    }
  }
}

}  // namespace fg::plan
