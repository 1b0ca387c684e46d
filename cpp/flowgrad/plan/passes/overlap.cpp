// Overlapping collectives with the step (passes.h): a traced DistributedDataParallel step records,
// after the whole backward, per bucket `cat` -> all_reduce_start_, then per bucket
// all_reduce_wait_ -> views. This pass moves each start, with what it needs that the backward has
// not made yet (the bucket's packing), up to just after the bucket's last gradient is made, and
// each wait down to just before the first instruction that touches its result, so the
// communication thread reduces a bucket while the rest of the backward runs. Moves only reorder
// instructions that touch no common buffer (one of them writing it); collectives keep their
// relative order, so every rank issues them as before. Top level only: a region moves whole.
#include "flowgrad/plan/analysis.h"
#include "flowgrad/plan/passes/passes.h"

namespace fg::plan {
namespace {

bool is_collective(const Instr& ins) {
  bool found = false;
  auto check = [&](const Instr& i, int) {
    found = found || (i.kind == InstrKind::Call && (i.op->id == OpId::all_reduce_ || i.op->id == OpId::all_reduce_start_ ||
                                                    i.op->id == OpId::all_reduce_wait_));
  };
  check(ins, 0);
  for (const Block& b : ins.blocks) walk(b, check);
  return found;
}

// The buffers an instruction (its blocks included) reads and writes.
struct Touch {
  std::vector<int> reads, writes;
  bool collective = false;
};

Touch touch(const Instr& ins) {
  Touch t;
  reads_deep(ins, [&](const Value& v) { t.reads.push_back(v.buffer); });
  writes_deep(ins, [&](const Value& v) { t.writes.push_back(v.buffer); });
  t.collective = is_collective(ins);
  return t;
}

// Buffers some instructions touch: whether another instruction must keep its order with them.
struct Footprint {
  std::vector<char> read, written;
  bool collective = false;
  explicit Footprint(size_t buffers) : read(buffers, 0), written(buffers, 0) {}
  void add(const Touch& t) {
    for (int b : t.reads) read[b] = 1;
    for (int b : t.writes) written[b] = 1;
    collective = collective || t.collective;
  }
  bool ordered_with(const Touch& t) const {
    if (collective && t.collective) return true;
    for (int b : t.writes)
      if (read[b] || written[b]) return true;
    for (int b : t.reads)
      if (written[b]) return true;
    return false;
  }
};

struct Overlap {
  Block& code;
  std::vector<Touch> touches;
  size_t buffers;

  // Moves code[s] (and every instruction in [lo, s) it must follow) before the other
  // instructions of [lo, s); returns its new index.
  size_t hoist(size_t s, size_t lo) {
    Footprint needed(buffers);
    needed.add(touches[s]);
    std::vector<bool> before(s - lo, false);
    for (size_t j = s; j-- > lo;) {
      if (!needed.ordered_with(touches[j])) continue;
      before[j - lo] = true;
      needed.add(touches[j]);
    }
    std::vector<size_t> order;
    for (size_t j = lo; j < s; ++j)
      if (before[j - lo]) order.push_back(j);
    const size_t at = lo + order.size();
    order.push_back(s);
    for (size_t j = lo; j < s; ++j)
      if (!before[j - lo]) order.push_back(j);
    permute(lo, order);
    return at;
  }

  // Moves code[w] down to just before the first later instruction it must precede.
  void sink(size_t w) {
    Footprint mine(buffers);
    mine.add(touches[w]);
    size_t j = w + 1;
    while (j < code.size() && !mine.ordered_with(touches[j])) ++j;
    std::vector<size_t> order;
    for (size_t k = w + 1; k < j; ++k) order.push_back(k);
    order.push_back(w);
    permute(w, order);
  }

  // code[lo + i] becomes the old code[order[i]] (order covers [lo, lo + order.size())).
  void permute(size_t lo, const std::vector<size_t>& order) {
    Block moved;
    std::vector<Touch> moved_touches;
    for (size_t j : order) moved.push_back(std::move(code[j])), moved_touches.push_back(std::move(touches[j]));
    for (size_t i = 0; i < order.size(); ++i) code[lo + i] = std::move(moved[i]), touches[lo + i] = std::move(moved_touches[i]);
  }
};

}  // namespace

Program overlap_collectives(Program p) {
  Block& code = p.body;
  Overlap o{code, {}, p.buffers.size()};
  for (const Instr& ins : code) o.touches.push_back(touch(ins));
  size_t lo = 0;  // the backward's first instruction: the forward stays as it was
  while (lo < code.size() && code[lo].phase == Phase::Forward) ++lo;
  for (size_t i = lo; i < code.size(); ++i)
    if (is_call(code[i], OpId::all_reduce_start_)) lo = o.hoist(i, lo) + 1;
  for (size_t i = code.size(); i-- > 0;)
    if (is_call(code[i], OpId::all_reduce_wait_)) o.sink(i);
  return p;
}

}  // namespace fg::plan
