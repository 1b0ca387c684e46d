// From a trace to a Program (program.h): every recorded call becomes an instruction over
// buffers, except view ops, which fold into layouts over their input's buffer; a traced branch
// becomes a region instruction whose blocks are recorded the same way. The Plan constructor then
// runs the pass pipeline (passes/), checks what plans cannot run, plans memory and lowers the
// result into an Executable (lower.cpp).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <unordered_map>
#include <unordered_set>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/core/env.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/plan/passes/passes.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

InstrKind region_kind(BranchKind kind) {
  switch (kind) {
    case BranchKind::Switch: return InstrKind::Switch;
    case BranchKind::While: return InstrKind::While;
    case BranchKind::Until: return InstrKind::Until;
    case BranchKind::LoopBackward: return InstrKind::LoopBackward;
    case BranchKind::Guard: return InstrKind::Guard;
  }
  return InstrKind::Guard;
}

// Milliseconds since the last lap (Plan::pass_ms).
struct Stopwatch {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double lap_ms() {
    auto now = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(now - std::exchange(start, now)).count();
  }
};

struct Builder {
  Program& program;
  Tracer& trace;
  std::vector<std::shared_ptr<Storage>>& storages;  // per buffer: the traced memory
  std::unordered_map<const Storage*, int> buffer_of{};
  std::unordered_map<const Storage*, std::string> names{};
  Block* code = &program.body;  // where record() appends (a block inside a region)
  std::string block_of{};       // the region whose block is being recorded ("" at the top level)
  int scope = -1;               // the update scope of the calls being recorded (Instr::scope)

  int add_buffer(BufferKind kind, const Tensor& t, std::string name) {
    int id = program.add_buffer({kind, std::move(name), t.storage()->bytes(), t.device(), t.dtype()});
    storages.push_back(t.storage());
    buffer_of[t.storage().get()] = id;
    return id;
  }
  std::string next_name() const { return "%" + std::to_string(program.buffers.size()); }

  Value value_of(const Tensor& t, int buffer) const {
    return {buffer, t.offset(), t.shape(), t.strides(), t.dtype()};
  }

  // A tensor read by an op: a known buffer, memory that existed before the trace, or a constant
  // built from host data during the step (fg.tensor(np_mask) in a forward): folded, as a fill is.
  Value read(const Tensor& t, const OpDef& op, size_t index) {
    return read(t, [&] { return "input " + std::to_string(index) + " of '" + op.name + "'"; });
  }
  template <class What>
  Value read(const Tensor& t, What what) {
    auto it = buffer_of.find(t.storage().get());
    if (it != buffer_of.end()) return value_of(t, it->second);
    if (t.storage()->serial() >= trace.first_serial) {
      FG_CHECK(!t.storage()->is_shape_only(), Value, "compile: ", what(), " (", fg::describe(t), ") was computed "
               "during the step outside the op registry (a host round trip of a traced value); a plan cannot replay "
               "that. Pass the tensor as a step input.");
      const int id = add_buffer(BufferKind::External, t, "const" + std::to_string(program.buffers.size()));
      program.buffers[id].constant = true;
      return value_of(t, id);
    }
    auto named = names.find(t.storage().get());
    std::string name = named != names.end() ? named->second : "ext" + std::to_string(program.buffers.size());
    return value_of(t, add_buffer(BufferKind::External, t, name));
  }

  void check_supported(const TracedCall& c) {
    FG_CHECK(!c.op->in(Group::DataDependent), Value, "compile: '", c.op->name,
             "' has an output shape that depends on its input values; plans need static shapes");
    bool on_cuda = !c.out.empty() ? c.out[0].device().is_cuda() : !c.in.empty() && c.in[0].device().is_cuda();
    FG_CHECK(!(c.op->in(Group::HostSync) && on_cuda), Value, "compile: '", c.op->name, "' reads device values on "
             "the host (index validation) on every call; a compiled CUDA step cannot contain a host sync. Run "
             "this op outside the compiled step, or compile on the CPU");
  }

  void record(const TracedCall& c, Phase phase) {
    if (c.branch) {
      record_branch(*c.branch, phase);
      code->back().origin = c.origin;
      return;
    }
    // Half widening and in-place writes through a temporary are ops of the trace already
    // (ops/decompose.h): every call here runs its kernel as recorded.
    check_supported(c);
    if (c.op->in(Group::View)) return;  // folded: the output is a layout over input 0's buffer
    Instr ins{c.op, c.attrs};
    ins.phase = phase;
    ins.origin = c.origin;
    ins.scope = scope;
    for (size_t i = 0; i < c.in.size(); ++i) {
      ins.in.push_back(read(c.in[i], *c.op, i));
      FG_CHECK(!(writes_input(*c.op, i) && program.buffers[ins.in[i].buffer].constant), Value, "compile: '",
               c.op->name, "' writes in place ", fg::describe(c.in[i]), ", a constant the step built from host data; "
               "a plan folds it once (write into a copy, e.g. t = t.clone(), or build it before compiling)");
    }
    for (const Tensor& t : c.out) {
      auto it = buffer_of.find(t.storage().get());  // in place: an input's buffer
      ins.out.push_back(value_of(t, it != buffer_of.end() ? it->second : add_buffer(BufferKind::Arena, t, next_name())));
    }
    code->push_back(std::move(ins));
  }

  // The region's own values: selector, loop state, accumulators.
  void record_state(const TracedBranch& tb, Region& r) {
    auto value = [&](const Tensor& t) {
      FG_CHECK(t.defined(), Runtime, "internal error: ", tb.label, " has an undefined value");
      return read(t, [&] { return "a value of " + tb.label; });
    };
    if (tb.kind == BranchKind::Switch) r.selector = value(tb.selector);
    for (auto [from, to] : {std::pair{&tb.init, &r.init}, {&tb.carried, &r.carried}, {&tb.stash, &r.stash},
                            {&tb.count, &r.count}, {&tb.step_input, &r.step_input}, {&tb.iteration, &r.iteration}})
      if (from->defined()) *to = value(*from);
    if (tb.loop) {
      r.loop = tb.loop->id;
      r.stash = value(tb.loop->stash);
      r.count = value(tb.loop->count);
    }
    for (const Tensor& t : tb.zeroed) r.zeroed.push_back(value(t));
  }

  // A region instruction: its blocks recorded like the top level, then what each block leaves
  // behind (copied or added into the buffers the region owns).
  void record_branch(TracedBranch& tb, Phase phase) {
    Instr ins{nullptr, {}, {}, {}, phase, -1, region_kind(tb.kind)};
    Region& r = ins.region;
    r.label = tb.label;
    r.max_iter = tb.max_iter;
    r.id = tb.id = program.regions++;
    for (const Tensor& t : tb.owned) r.owned.push_back(add_buffer(BufferKind::Arena, t, next_name()));
    record_state(tb, r);
    Block* outer = code;
    std::string outer_block = block_of;
    block_of = tb.label;
    ins.blocks.resize(tb.blocks.size());
    for (size_t b = 0; b < tb.blocks.size(); ++b) {
      code = &ins.blocks[b];
      for (const TracedCall& c : tb.blocks[b]) record(c, phase);
      for (const TracedResult& res : tb.results[b]) emit_result(res, ins.blocks[b]);
    }
    code = outer;
    block_of = outer_block;
    if (tb.kind == BranchKind::While || tb.kind == BranchKind::Until)  // the halt
      r.selector = read(tb.selector, [&] { return "a value of " + tb.label; });
    for (int id : r.owned) {
      r.present.emplace_back();
      for (size_t b = 0; b < tb.results.size(); ++b)
        for (const TracedResult& res : tb.results[b])
          if (res.value.defined() && buffer_of.at(res.target.storage().get()) == id) r.present.back().push_back(static_cast<int>(b));
    }
    code->push_back(std::move(ins));
  }

  void emit_result(const TracedResult& r, Block& block) {
    Value target = value_of(r.target, buffer_of.at(r.target.storage().get()));
    if (!r.value.defined()) {
      if (!r.accumulate) block.push_back({&op_def(OpId::fill_), Attrs{{"value", 0.0}}, {target}, {target}});
      return;
    }
    Value v = read(r.value, [] { return std::string("a branch's result"); });
    if (r.accumulate) block.push_back({&op_def(OpId::add), {}, {target, v}, {target}});
    else block.push_back({&op_def(OpId::contiguous), {}, {v}, {target}});
  }

  std::string name_of(const Tensor& t) const {
    auto it = names.find(t.storage().get());
    return it != names.end() ? it->second : fg::describe(t);
  }
};

// A step that draws gets its {seed, base} pair: the tracer's pair tensor, which every random call
// (or the philox_derive of its stream) reads. Lowering binds it and the executable writes it before
// a run when the host generator moved elsewhere (Executable::sync_rng).
void declare_philox(Builder& b) {
  if (!b.trace.philox.defined()) return;
  Program& p = b.program;
  p.philox = b.add_buffer(BufferKind::External, b.trace.philox, "philox");
  p.buffers[p.philox].bytes = 2 * sizeof(int64_t);
}

// The step's last instruction: base += rng_advance, so the next run draws the next counters.
void append_philox_advance(Program& p) {
  if (p.philox < 0) return;
  const Value pair = p.whole(p.philox);
  Instr advance{&op_def(OpId::philox_advance_), Attrs{{"by", p.rng_advance}}, {pair}, {pair}};
  advance.phase = p.body.empty() ? Phase::Forward : p.body.back().phase;
  p.body.push_back(std::move(advance));
}

// A host read of a value the plan computes would freeze a data-dependent decision.
void check_host_reads(const Tracer& trace, const Builder& b, const DefUse& du) {
  for (const auto& [t, what] : trace.host_reads) {
    auto it = b.buffer_of.find(t.storage().get());
    if (it == b.buffer_of.end()) continue;
    const BufferDecl& buf = b.program.buffers[it->second];
    bool computed = !buf.constant && (buf.kind != BufferKind::External || du.written(it->second));
    FG_CHECK(!computed, Value, host_read_message(t, what));
  }
}

Device device_of(const Tracer& trace, const PlanSpec& spec) {
  if (!spec.inputs.empty()) return spec.inputs[0].device();
  if (trace.calls.empty() || trace.calls[0].out.empty()) return Device{};
  return trace.calls[0].out[0].device();
}

// Every call has a kernel for the plan's device, and only external memory lives elsewhere.
void check_devices(const Program& p) {
  walk(p.body, [&](const Instr& ins, int) {
    FG_CHECK(ins.kind != InstrKind::Call || p.device.is_cpu() || ins.op->cuda, Device, "compile: '", ins.op->name,
             "' has no kernel for ", p.device.str(), " (", cuda_missing_reason(*ins.op), ")");
  });
  for (const BufferDecl& buf : p.buffers)
    FG_CHECK(buf.device == p.device || buf.kind == BufferKind::External, Device, "compile: the step mixes ",
             p.device.str(), " and ", buf.device.str(), " (", buf.name, ")");
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Update: return "optimizer";
  }
  return "?";
}

Tensors inputs_for_trace(const Tensors& inputs, const Tensors& held) {
  std::unordered_set<const Storage*> taken;
  for (const Tensor& t : held) taken.insert(t.storage().get());
  Tensors out;
  for (const Tensor& x : inputs) {
    Tensor t = x;
    if (x.offset() != 0 || !x.is_contiguous() || taken.count(x.storage().get())) {
      t = Tensor::empty(x.shape(), x.dtype(), x.device());
      raw::copy_into(t, x);
      if (requires_grad(x)) set_requires_grad(t, true);
    }
    taken.insert(t.storage().get());
    out.push_back(t);
  }
  return out;
}

Plan::Plan(Tracer& trace, const PlanSpec& spec) {
  trace.stop();
  Program program;
  std::vector<std::shared_ptr<Storage>> storages;
  Builder b{program, trace, storages};
  for (const auto& [name, t] : spec.names) b.names.emplace(t.storage().get(), name);
  FG_CHECK(!spec.outputs.empty() || !spec.grads.empty() || !trace.calls.empty(), Value,
           "compile: the traced step ran no op");
  program.device = device_of(trace, spec);
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const Tensor& x = spec.inputs[i];
    FG_CHECK(!b.buffer_of.count(x.storage().get()), Value, "compile: input ", i, " shares memory with an earlier input");
    int id = b.add_buffer(BufferKind::Input, x, "x" + std::to_string(i));
    program.buffers[id].bytes = static_cast<size_t>(x.numel()) * itemsize(x.dtype());
    program.inputs.push_back({id, 0, x.shape(), contiguous_strides(x.shape()), x.dtype()});
  }
  declare_philox(b);
  // What the step takes of the generator, drawn or not (levels, switches and loops fork it once).
  program.rng_advance = static_cast<int64_t>(trace.rng_end.offset - trace.rng_start.offset);
  Stopwatch clock;
  for (size_t i = 0; i < trace.calls.size(); ++i) {
    const TracedCall& c = trace.calls[i];
    ++stats_.traced;
    if (c.op && c.op->in(Group::View)) ++stats_.views;
    auto in_scope = [i](const std::pair<size_t, size_t>& s) { return s.first <= i && i < s.second; };
    auto found = std::find_if(trace.update_scopes.begin(), trace.update_scopes.end(), in_scope);
    b.scope = found == trace.update_scopes.end() ? -1 : static_cast<int>(found - trace.update_scopes.begin());
    b.record(c, i >= trace.update_start ? Phase::Update : i >= trace.backward_start ? Phase::Backward : Phase::Forward);
  }
  append_philox_advance(program);
  origins_ = std::move(trace.origins);
  for (const Tensor& out : spec.outputs)
    program.outputs.push_back(b.read(out, [] { return std::string("an output of the step"); }));
  for (const auto& [param, grad] : spec.grads) {
    auto it = b.buffer_of.find(grad.storage().get());
    FG_CHECK(it != b.buffer_of.end(), Value, "compile: the gradient of a parameter ", fg::describe(param),
             " was not computed by the traced step");
    program.grads.push_back({b.value_of(grad, it->second), param.shape(), param.dtype(), b.name_of(param)});
  }
  passes_.emplace_back("trace", stats_.traced, count_calls(program.body));
  pass_ms_.emplace_back("trace", clock.lap_ms());
  program = run_pipeline(std::move(program), &passes_, &pass_ms_);
  check_host_reads(trace, b, def_use(program));
  check_devices(program);
  for (const Tensor& t : spec.watch) watched_.emplace_back(t, t.storage());
  Binding binding;
  binding.storages = std::move(storages);
  binding.poison = env::plan_debug();
  lower(std::move(program), std::move(binding), spec);
  trace.calls.clear();
  trace.host_reads.clear();
}

}  // namespace fg::plan
