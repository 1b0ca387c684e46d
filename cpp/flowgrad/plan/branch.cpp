// Lowered regions: data-dependent control flow inside a plan (switch, while_/until and their
// backward, guarded optimizer updates; program.h's region kinds). Each runs as one record whose
// blocks go through the executor's own loop (executable.cpp run_code). The CPU executor reads each decision (selector, halt,
// iteration count) from its slot on the host and runs the chosen block's instructions; on CUDA
// that read synchronises today, and each kind names the CUDA conditional node (IF, SWITCH,
// WHILE) that holds it once plans are captured as graphs.
//
// Loops keep what their backward needs in slots: the input of every iteration in a stash of
// max_iter rows and the iteration count. The backward runs count iterations in reverse, each
// recomputing the body on its saved input and running the body's backward (per-iteration
// checkpointing: a body's intermediates are never kept across iterations).
#include <algorithm>
#include <sstream>
#include <string_view>

#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {

const char* branch_kind_name(BranchKind kind) {
  switch (kind) {
    case BranchKind::Switch: return "switch";
    case BranchKind::While: return "while";
    case BranchKind::Until: return "until";
    case BranchKind::LoopBackward: return "loop_backward";
    case BranchKind::Guard: return "guard";
  }
  return "?";
}

const char* Branch::conditional() const {
  if (kind == BranchKind::Switch) return blocks.size() == 2 ? "IF/ELSE" : "SWITCH";
  return kind == BranchKind::Guard ? "IF" : "WHILE";
}

const char* op_name(const Instruction& ins) { return ins.branch ? branch_kind_name(ins.branch->kind) : ins.op->name; }

// ---- binding and running ----

void Executable::bind_branch(Branch& b) {
  auto tensor = [&](const Value& v) { return layout(buffers_[v.buffer].storage, v); };
  for (auto& block : b.blocks)
    for (Instruction& ins : block) bind_instruction(ins);
  for (auto [v, t] : {std::pair{&b.selector, &b.selector_t}, {&b.init, &b.init_t}, {&b.carried, &b.carried_t},
                      {&b.count, &b.count_t}, {&b.step_input, &b.step_input_t}, {&b.iteration, &b.iteration_t}})
    if (v->buffer >= 0) *t = tensor(*v);
  b.zeroed_t.clear();
  for (const Value& v : b.zeroed) b.zeroed_t.push_back(tensor(v));
  b.stash_rows.clear();
  if (b.stash.buffer >= 0) {
    Dims row(std::vector<int64_t>(b.stash.shape.begin() + 1, b.stash.shape.end()));
    for (int64_t k = 0; k < b.stash.shape[0]; ++k)
      b.stash_rows.push_back(tensor({b.stash.buffer, b.stash.offset + k * row.numel(), row, contiguous_strides(row), b.stash.dtype}));
  }
}

void Executable::run_block(Branch& b, size_t index) {
  if (b.runs.size() != b.blocks.size()) b.runs.assign(b.blocks.size(), 0);
  ++b.runs[index];
  run_code(b.blocks[index], nullptr);  // the executor's own loop
}

void Executable::run_branch(Instruction& ins) {
  Branch& b = *ins.branch;
  b.taken = -1;
  switch (b.kind) {
    case BranchKind::Switch: {
      double v = item(b.selector_t);
      auto n = static_cast<int64_t>(b.blocks.size()), index = static_cast<int64_t>(v);
      FG_CHECK(v == static_cast<double>(index) && index >= 0 && index < n, Index, b.label,
               ": the selector chose branch ", v, " but there are ", n, " branches");
      b.taken = static_cast<int>(index);
      run_block(b, static_cast<size_t>(index));
      return;
    }
    case BranchKind::While:
    case BranchKind::Until: {
      bool until = b.kind == BranchKind::Until;
      const size_t halt = until ? 1 : 0, body = until ? 0 : 1;
      auto at = [&](int64_t n) {  // the iteration the blocks' random streams derive from
        if (b.iteration.buffer >= 0) raw::fill(env_, b.iteration_t, static_cast<double>(n));
      };
      auto halted = [&] {
        run_block(b, halt);
        return item(b.selector_t) > 0;
      };
      raw::copy_into(env_, b.carried_t, b.init_t);
      int64_t n = 0;
      while (n < b.max_iter) {
        at(n);
        if (!until && halted()) break;
        raw::copy_into(env_, b.stash_rows[n], b.carried_t);
        run_block(b, body);
        ++n;
        if (until && halted()) break;
      }
      raw::fill(env_, b.count_t, static_cast<double>(n));
      b.taken = n > 0 ? 0 : -1;
      return;
    }
    case BranchKind::LoopBackward: {
      auto n = static_cast<int64_t>(item(b.count_t));
      raw::copy_into(env_, b.carried_t, b.init_t);
      for (const Tensor& t : b.zeroed_t) raw::fill(env_, t, 0);
      for (int64_t k = n - 1; k >= 0; --k) {
        raw::copy_into(env_, b.step_input_t, b.stash_rows[k]);
        if (b.iteration.buffer >= 0) raw::fill(env_, b.iteration_t, static_cast<double>(k));
        run_block(b, 0);
      }
      b.taken = n > 0 ? 0 : -1;
      return;
    }
    case BranchKind::Guard: {
      bool run = std::any_of(b.guard.begin(), b.guard.end(),
                             [&](const auto& p) { return branches_[p.first]->taken == p.second; });
      if (run) {
        b.taken = 0;
        run_block(b, 0);
      }
      return;
    }
  }
}

// ---- text and DOT ----

namespace {

std::string header(const Branch& b) {
  std::ostringstream os;
  os << branch_kind_name(b.kind) << " [conditional " << b.conditional() << ", branch " << b.id;
  if (b.max_iter) os << ", max_iter " << b.max_iter;
  if (b.loop >= 0) os << ", of loop " << b.loop;
  for (const auto& [id, block] : b.guard) os << ", when branch " << id << " took block " << block;
  os << "] " << b.label;
  return os.str();
}

std::string block_name(const Branch& b, size_t i) {
  switch (b.kind) {
    case BranchKind::Switch: return "branch " + std::to_string(i);
    case BranchKind::While: return i == 0 ? "halt" : "body";
    case BranchKind::Until: return i == 0 ? "body" : "halt";
    case BranchKind::LoopBackward: return "body backward (per iteration, last first)";
    case BranchKind::Guard: return "then";
  }
  return "?";
}

}  // namespace

void Plan::str_block(std::ostream& os, const std::vector<Instruction>& code, const std::string& indent) const {
  for (size_t i = 0; i < code.size(); ++i) {
    const Instruction& ins = code[i];
    os << indent << i << ": ";
    for (size_t k = 0; k < ins.out.size(); ++k) os << (k ? ", " : "") << describe(ins.out[k]);
    if (!ins.out.empty()) os << " = ";
    if (ins.branch) {
      os << header(*ins.branch);
      if (ins.branch->selector.buffer >= 0) os << " (decided by " << describe(ins.branch->selector) << ")";
      os << "\n";
      for (size_t b = 0; b < ins.branch->blocks.size(); ++b) {
        os << indent << "    " << block_name(*ins.branch, b) << ":\n";
        str_block(os, ins.branch->blocks[b], indent + "      ");
      }
      continue;
    }
    os << ins.op->name << "(";
    for (size_t k = 0; k < ins.in.size(); ++k) os << (k ? ", " : "") << describe(ins.in[k]);
    os << ")";
    std::string attrs = ins.attrs.str();
    if (!attrs.empty()) os << " {" << attrs << "}";
    if (!ins.out.empty()) os << "  # " << dtype_name(ins.out[0].dtype) << " " << to_string(ins.out[0].shape);
    os << "\n";
  }
}

void Plan::dot_block(std::ostream& os, const std::vector<Instruction>& code, std::vector<std::string>& producer,
                     const std::string& prefix) const {
  for (size_t i = 0; i < code.size(); ++i) {
    const Instruction& ins = code[i];
    std::string node = prefix + std::to_string(i);
    os << "  " << node << " [label=\"" << i << ": " << op_name(ins);
    if (ins.branch) os << " (" << ins.branch->conditional() << ")";
    if (!ins.out.empty() && !ins.branch) os << "\\n" << to_string(ins.out[0].shape);
    os << "\"";
    if (ins.branch) os << ", shape=diamond, style=filled, fillcolor=\"#dfe9f7\"";
    else if (mutates_inputs(*ins.op)) os << ", style=filled, fillcolor=\"#fde2c8\"";
    os << "];\n";
    for (const Value& v : ins.in) {
      if (!producer[v.buffer].empty()) os << "  " << producer[v.buffer] << " -> " << node << ";\n";
      else if (buffers()[v.buffer].kind == BufferKind::Input) os << "  b" << v.buffer << " -> " << node << ";\n";
    }
    if (ins.branch)
      for (size_t b = 0; b < ins.branch->blocks.size(); ++b) {
        std::string inner = node + "_" + std::to_string(b) + "_";
        os << "  subgraph cluster_" << inner << " {\n  label=\"" << op_name(ins) << " " << ins.branch->id << ": "
           << block_name(*ins.branch, b) << "\"; style=dashed;\n";
        std::vector<std::string> scope = producer;  // a block sees the values made before it
        dot_block(os, ins.branch->blocks[b], scope, inner);
        os << "  }\n";
        if (!ins.branch->blocks[b].empty()) os << "  " << node << " -> " << inner << "0 [style=dotted];\n";
      }
    for (const Value& v : ins.out) producer[v.buffer] = node;
  }
}

}  // namespace fg::plan
