// The plan façade: its counts and its text and DOT forms (the executable runs it, executable.cpp).
#include <algorithm>
#include <sstream>

#include "flowgrad/plan/capture.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {

void Plan::bind_arena(std::shared_ptr<Storage> arena) { exec_->bind_arena(std::move(arena)); }

void share_arena(Plan& a, Plan& b) {
  FG_CHECK(a.device() == b.device(), Device, "share_arena: plans on ", a.device().str(), " and ", b.device().str());
  if (a.arena() == b.arena()) return;
  std::shared_ptr<Storage> arena = a.arena()->bytes() >= b.arena()->bytes() ? a.arena() : b.arena();
  a.bind_arena(arena);
  b.bind_arena(arena);
}

bool Plan::up_to_date() const {
  for (const auto& [t, storage] : watched_)
    if (t.storage() != storage) return false;
  return true;
}

PlanStats Plan::stats() const {
  PlanStats s = stats_;
  const Executable& e = *exec_;
  const auto& code = e.instructions();
  const auto& runs = e.runs();
  s.instructions = static_cast<int64_t>(code.size());
  for (size_t i = 0; i < code.size(); ++i)  // a fused run is one kernel (per tile pass)
    s.kernels += code[i].run < 0 || static_cast<int>(i) == runs[code[i].run].first;
  for (const FusedRun& run : runs) s.fused_runs += (*run.code)[run.first].run >= 0;  // not fallen back
  const RunStats& r = e.run_stats();
  s.poisoned_bytes = r.poisoned_bytes;
  s.allocations = r.allocations;
  s.allocating = r.allocating;
  s.host_syncs = r.host_syncs;
  s.philox_writes = r.philox_writes;
  s.inputs_copied = r.inputs_copied;
  s.cuda_fusion = r.cuda_fusion;
  s.cuda_graph = e.capture().status();
  s.cuda_graph_replays = static_cast<int64_t>(e.capture().replays());
  s.poisons = e.poisons();
  for (int i : s.allocating) s.allocating_ops.emplace_back(i, op_name(code[i]));
  return s;
}

std::map<std::string, StatValue> PlanStats::to_map() const {
  auto count = [](auto n) { return StatValue(static_cast<int64_t>(n)); };
  std::map<std::string, StatValue> out{
      {"instructions", count(instructions)}, {"kernels", count(kernels)}, {"fused_runs", count(fused_runs)},
      {"fused", count(fused)}, {"traced", count(traced)}, {"views_folded", count(views)},
      {"constants_folded", count(folded)}, {"dead_eliminated", count(eliminated)},
      {"common_eliminated", count(common)}, {"transposes_folded", count(transposes)},
      {"arena_bytes", count(arena_bytes)}, {"naive_bytes", count(naive_bytes)}, {"cuda_graph", cuda_graph},
      {"cuda_graph_replays", count(cuda_graph_replays)}, {"cuda_fusion", cuda_fusion},
      {"branches", count(branches)}, {"allocations", count(allocations)}, {"allocating", allocating_ops},
      {"host_syncs", count(host_syncs)}, {"philox_writes", count(philox_writes)},
      {"inputs_copied", count(inputs_copied)}};
  if (poisons) out.emplace("poisoned_bytes", count(poisoned_bytes));
  return out;
}

std::string Plan::str() const {
  const auto& inputs = exec_->inputs();
  const auto& buffers = exec_->buffers();
  std::ostringstream os;
  os << "Plan on " << device().str() << ": " << instructions().size() << " instructions (traced " << stats_.traced
     << ", " << stats_.views << " views folded, " << stats_.common << " common subexpressions, " << stats_.folded
     << " constants folded, " << stats_.eliminated << " dead), arena " << stats_.arena_bytes << " bytes (naive "
     << stats_.naive_bytes << ")\n";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = inputs[i];
    const std::string& copied = exec_->input_copied_because(i);
    os << "  input " << buffers[v.buffer].name << ": " << dtype_name(v.dtype) << " " << to_string(v.shape)
       << (copied.empty() ? ", read in place" : ", copied: " + copied) << "\n";
  }
  str_block(os, instructions(), "  ");
  for (const Value& v : exec_->outputs()) os << "  output " << describe(v) << "\n";
  return os.str();
}

std::string Plan::dot() const {
  const auto& buffers = exec_->buffers();
  std::ostringstream os;
  os << "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  std::vector<std::string> producer(buffers.size());
  for (const Value& v : exec_->inputs())
    os << "  b" << v.buffer << " [label=\"" << buffers[v.buffer].name << "\\n" << to_string(v.shape)
       << "\", shape=ellipse];\n";
  dot_block(os, instructions(), producer, "i");
  os << "}\n";
  return os.str();
}

}  // namespace fg::plan
