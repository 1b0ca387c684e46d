// From a trace to instructions over buffers, then the passes:
// - view folding: a view op is no instruction; its output is a layout over its input's buffer;
// - common subexpressions: an op without side effects applied again to the same values with the
//   same attributes reuses the first result, except that backward never reuses a forward result
//   that is dead by then (recomputation that gradient checkpointing asked for is kept);
// - constant folding: ops whose inputs are all constants (fills, aranges and what is computed
//   from them only) keep the values computed while tracing;
// - gradient binding: each parameter's gradient is written straight into its .grad buffer when
//   the producing op owns the whole buffer, else copied there at the end;
// - dead-code elimination: instructions whose results nobody reads are dropped;
// - transpose folding: a 2-D matmul whose result is only copied out transposed (every Linear's
//   weight gradient) computes the transposed product directly: (A B)^T = B^T A^T.
#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/core/env.h"
#include "flowgrad/plan/branch.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {

// Milliseconds since the last lap (Plan::pass_ms).
struct Stopwatch {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double lap_ms() {
    auto now = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(now - std::exchange(start, now)).count();
  }
};

struct Builder {
  Plan& plan;
  Tracer& trace;
  std::unordered_map<const Storage*, int> buffer_of{};
  std::unordered_map<const Storage*, std::string> names{};
  std::vector<Instruction>* code = &plan.code_;  // where record() appends (a block inside a branch)
  std::string block_of{};  // the branch whose block is being recorded ("" at the top level)

  int add_buffer(BufferKind kind, const Tensor& t, std::string name) {
    Buffer b{kind, std::move(name)};
    b.storage = t.storage();
    b.bytes = t.storage()->bytes();
    b.device = t.device();
    b.dtype = t.dtype();
    plan.buffers_.push_back(std::move(b));
    int id = static_cast<int>(plan.buffers_.size()) - 1;
    buffer_of[t.storage().get()] = id;
    return id;
  }

  Value value_of(const Tensor& t, int buffer) const {
    return {buffer, t.offset(), t.shape(), t.strides(), t.dtype()};
  }

  // A tensor read by an op: a known buffer, or memory that existed before the trace.
  Value read(const Tensor& t, const OpDef& op, size_t index) {
    return read(t, [&] { return "input " + std::to_string(index) + " of '" + op.name + "'"; });
  }
  template <class What>
  Value read(const Tensor& t, What what) {
    auto it = buffer_of.find(t.storage().get());
    if (it != buffer_of.end()) return value_of(t, it->second);
    FG_CHECK(t.storage()->serial() < trace.first_serial, Value, "compile: ", what(), " (", fg::describe(t), ") was computed during the step outside the op registry (e.g. fg.tensor(...) "
             "of a traced value, or a host round trip); a plan cannot replay that. Make constants before "
             "compiling, or pass the tensor as a step input.");
    auto named = names.find(t.storage().get());
    std::string name = named != names.end() ? named->second : "ext" + std::to_string(plan.buffers_.size());
    return value_of(t, add_buffer(BufferKind::External, t, name));
  }

  void check_supported(const TracedCall& c) {
    FG_CHECK(!c.op->in(Group::DataDependent), Value, "compile: '", c.op->name,
             "' has an output shape that depends on its input values; plans need static shapes");
    bool on_cuda = !c.out.empty() ? c.out[0].device().is_cuda() : !c.in.empty() && c.in[0].device().is_cuda();
    FG_CHECK(!(c.op->in(Group::HostSync) && on_cuda), Value, "compile: '", c.op->name, "' reads device values on "
             "the host (index validation) on every call; a compiled CUDA step cannot contain a host sync. Run "
             "this op outside the compiled step, or compile on the CPU");
    if (c.op->flags & kHalfNative) return;
    auto half = [](const Tensor& t) { return is_half(t.dtype()); };
    FG_CHECK(std::none_of(c.in.begin(), c.in.end(), half) && std::none_of(c.out.begin(), c.out.end(), half),
             DType, "compile: '", c.op->name, "' computes float16/bfloat16 through float32 copies; compiled plans "
             "do not support that yet (compile in float32)");
  }

  // A plan calls an in-place op's kernel on its target directly: that is what eager code does
  // only when the target is contiguous and of the result dtype and no other input aliases it.
  void check_in_place(const TracedCall& c) {
    const Tensor& target = c.in[0];
    Specs specs = c.op->shape_rule(c.in, c.attrs);
    bool aliased = false;
    for (size_t i = 1; i < c.in.size(); ++i)
      aliased |= c.in[i].storage() == target.storage() &&
                 (c.in[i].offset() != target.offset() || c.in[i].strides() != target.strides());
    FG_CHECK(target.is_contiguous() && specs[0].dtype == target.dtype() && !aliased, Value, "compile: '", c.op->name,
             "' writes ", fg::describe(target), " through a cast, a strided target or an overlapping input; "
             "compiled plans support in-place ops on contiguous targets of the result dtype only");
  }

  void record(const TracedCall& c, Phase phase) {
    if (c.branch) {
      record_branch(*c.branch, phase);
      code->back().origin = c.origin;
      return;
    }
    FG_CHECK(block_of.empty() || !c.op->in(Group::Random), Value, "compile: '", c.op->name, "' draws random numbers ",
             "inside ", block_of, "; compiled plans do not replay random ops inside switch branches or loop bodies yet");
    check_supported(c);
    if (c.op->in(Group::InPlace)) check_in_place(c);
    if (c.op->in(Group::View)) return;  // folded: the output is a layout over input 0's buffer
    Instruction ins{c.op, c.attrs};
    ins.phase = phase;
    ins.origin = c.origin;
    for (size_t i = 0; i < c.in.size(); ++i) ins.in.push_back(read(c.in[i], *c.op, i));
    for (const Tensor& t : c.out) {
      auto it = buffer_of.find(t.storage().get());  // in place: an input's buffer
      int id = it != buffer_of.end() ? it->second
                                     : add_buffer(BufferKind::Arena, t, "%" + std::to_string(plan.buffers_.size()));
      ins.out.push_back(value_of(t, id));
    }
    if (c.op->in(Group::Random)) ins.rng_delta = random_delta(c);
    for (const Value& v : ins.out) plan.buffers_[v.buffer].written = true;
    if (mutates_inputs(*c.op))
      for (const Value& v : ins.in) plan.buffers_[v.buffer].written = true;
    code->push_back(std::move(ins));
  }

  // A branch instruction: its blocks recorded like the top level, then what each block leaves
  // behind (copied or added into the buffers the branch owns).
  void record_branch(TracedBranch& tb, Phase phase) {
    auto br = std::make_shared<Branch>();
    br->kind = tb.kind;
    br->label = tb.label;
    br->max_iter = tb.max_iter;
    br->id = tb.id = static_cast<int>(plan.branches_.size());
    plan.branches_.push_back(br);
    std::vector<int> owned;
    for (const Tensor& t : tb.owned) owned.push_back(add_buffer(BufferKind::Arena, t, "%" + std::to_string(plan.buffers_.size())));
    auto value = [&](const Tensor& t) {
      FG_CHECK(t.defined(), Runtime, "internal error: ", tb.label, " has an undefined value");
      return read(t, [&] { return "a value of " + tb.label; });
    };
    if (tb.kind == BranchKind::Switch) br->selector = value(tb.selector);
    for (auto [from, to] : {std::pair{&tb.init, &br->init}, {&tb.carried, &br->carried}, {&tb.stash, &br->stash},
                            {&tb.count, &br->count}, {&tb.step_input, &br->step_input}})
      if (from->defined()) *to = value(*from);
    if (tb.loop) {
      br->loop = tb.loop->id;
      br->stash = value(tb.loop->stash);
      br->count = value(tb.loop->count);
    }
    for (const Tensor& t : tb.zeroed) br->zeroed.push_back(value(t));
    const int mark = static_cast<int>(plan.buffers_.size());
    std::vector<Instruction>* outer = code;
    std::string outer_block = block_of;
    block_of = tb.label;
    br->blocks.resize(tb.blocks.size());
    for (size_t b = 0; b < tb.blocks.size(); ++b) {
      code = &br->blocks[b];
      for (const TracedCall& c : tb.blocks[b]) record(c, phase);
      for (const TracedResult& r : tb.results[b]) emit_result(r, br->blocks[b]);
    }
    code = outer;
    block_of = outer_block;
    if (tb.kind == BranchKind::While || tb.kind == BranchKind::Until) br->selector = value(tb.selector);  // the halt
    for (int id : owned) {
      br->present.emplace_back();
      for (size_t b = 0; b < tb.results.size(); ++b)
        for (const TracedResult& r : tb.results[b])
          if (r.value.defined() && buffer_of.at(r.target.storage().get()) == id) br->present.back().push_back(static_cast<int>(b));
    }
    Instruction ins{&branch_op(tb.kind), {}};
    ins.phase = phase;
    ins.branch = br;
    std::vector<bool> listed(plan.buffers_.size(), false);
    for (int id : owned) listed[id] = true;
    auto outer_read = [&](const Value& v) {
      if (v.buffer < 0 || v.buffer >= mark || listed[v.buffer]) return;
      listed[v.buffer] = true;
      ins.in.push_back(whole(v.buffer));
    };
    for (Value* v : branch_values(*br)) outer_read(*v);
    for (auto& block : br->blocks)
      for_each_instruction(block, [&](const Instruction& inner) {
        for (const auto* values : {&inner.in, &inner.out})
          for (const Value& v : *values) outer_read(v);
      });
    for (int id : owned) {
      ins.out.push_back(whole(id));
      plan.buffers_[id].written = true;
    }
    code->push_back(std::move(ins));
  }

  // The whole buffer as one flat value.
  Value whole(int id) const {
    const Buffer& b = plan.buffers_[id];
    int64_t n = static_cast<int64_t>(b.bytes / itemsize(b.dtype));
    return {id, 0, Dims{n}, Dims{1}, b.dtype};
  }

  void emit_result(const TracedResult& r, std::vector<Instruction>& block) {
    Value target = value_of(r.target, buffer_of.at(r.target.storage().get()));
    if (!r.value.defined()) {
      if (!r.accumulate) block.push_back({&op_def(OpId::fill_), Attrs{{"value", 0.0}}, {target}, {target}});
      return;
    }
    Value v = read(r.value, [] { return std::string("a branch's result"); });
    if (r.accumulate) block.push_back({&op_def(OpId::add), {}, {target, v}, {target}});
    else block.push_back({&op_def(OpId::contiguous), {}, {v}, {target}});
  }


  int64_t random_delta(const TracedCall& c) {
    auto seed = static_cast<uint64_t>(c.attrs.i("seed"));
    auto offset = static_cast<uint64_t>(c.attrs.i("offset"));
    FG_CHECK(seed == trace.rng_start.seed && offset >= trace.rng_start.offset && offset < trace.rng_end.offset,
             Value, "compile: '", c.op->name, "' draws from a derived random stream (a random op inside a "
             "multi-branch graph level); compiled plans replay draws from the global generator only");
    return static_cast<int64_t>(offset - trace.rng_start.offset);
  }

  void eliminate_common_subexpressions(std::vector<Value>& outputs) {
    std::vector<int> rename(plan.buffers_.size());
    for (size_t i = 0; i < rename.size(); ++i) rename[i] = static_cast<int>(i);
    std::vector<int> version(plan.buffers_.size(), 0), writers(plan.buffers_.size(), 0);
    for (const Instruction& ins : plan.code_)
      for (const Value& v : ins.out) ++writers[v.buffer];
    std::vector<size_t> last_use(plan.buffers_.size(), 0);
    for (size_t i = 0; i < plan.code_.size(); ++i)
      for (const auto* values : {&plan.code_[i].in, &plan.code_[i].out})
        for (const Value& v : *values) last_use[v.buffer] = i;
    for (const Value& v : outputs) last_use[v.buffer] = plan.code_.size();
    std::unordered_map<std::string, size_t> seen;  // key -> index in kept
    std::vector<Instruction> kept;
    for (size_t i = 0; i < plan.code_.size(); ++i) {
      Instruction& ins = plan.code_[i];
      for (Value& v : ins.in) v.buffer = rename[v.buffer];
      if (ins.branch) rename_in_branch(*ins.branch, rename);
      bool pure = !(ins.op->in(Group::Random) || mutates_inputs(*ins.op));
      for (const Value& v : ins.out) pure &= writers[v.buffer] == 1 && plan.buffers_[v.buffer].kind == BufferKind::Arena;
      std::ostringstream key;
      key << ins.op << '|' << ins.attrs.str();
      for (const Value& v : ins.in)
        key << '|' << v.buffer << '@' << version[v.buffer] << ':' << v.offset << to_string(v.shape)
            << to_string(v.strides) << static_cast<int>(v.dtype);
      auto found = pure ? seen.find(key.str()) : seen.end();
      bool alive = found != seen.end();
      bool across = alive && ins.phase != Phase::Forward && kept[found->second].phase == Phase::Forward;
      for (size_t k = 0; across && alive && k < ins.out.size(); ++k)
        alive = last_use[kept[found->second].out[k].buffer] >= i;
      if (alive) {
        const Instruction& first = kept[found->second];
        for (size_t k = 0; k < ins.out.size(); ++k) {
          rename[ins.out[k].buffer] = first.out[k].buffer;
          last_use[first.out[k].buffer] = std::max(last_use[first.out[k].buffer], last_use[ins.out[k].buffer]);
        }
        ++plan.stats_.common;
        continue;
      }
      for (const Value& v : ins.out) ++version[v.buffer];
      if (mutates_inputs(*ins.op))
        for (const Value& v : ins.in) ++version[v.buffer];
      kept.push_back(std::move(ins));
      if (pure) seen[key.str()] = kept.size() - 1;
    }
    plan.code_ = std::move(kept);
    for (Value& v : outputs) v.buffer = rename[v.buffer];
    for (auto& [storage, id] : buffer_of) id = rename[id];
  }

  // Constants: outputs of non-random ops without side effects whose inputs are all constants,
  // written by nobody else. Their traced values are kept and the instruction goes.
  void fold_constants() {
    std::vector<int> writers(plan.buffers_.size(), 0);
    for (const Instruction& ins : plan.code_)
      for (const Value& v : ins.out) ++writers[v.buffer];
    std::vector<Instruction> kept;
    for (Instruction& ins : plan.code_) {
      bool foldable = !(ins.op->in(Group::Random) || mutates_inputs(*ins.op));
      for (const Value& v : ins.in) foldable &= plan.buffers_[v.buffer].constant;
      for (const Value& v : ins.out) foldable &= writers[v.buffer] == 1 && plan.buffers_[v.buffer].kind == BufferKind::Arena;
      if (!foldable) {
        kept.push_back(std::move(ins));
        continue;
      }
      for (const Value& v : ins.out) {
        Buffer& b = plan.buffers_[v.buffer];
        b.kind = BufferKind::External;
        b.constant = true;
        b.name = "const" + std::to_string(v.buffer);
      }
      ++plan.stats_.folded;
    }
    plan.code_ = std::move(kept);
  }

  // Each parameter's gradient lands in a persistent tensor bound to its .grad.
  void bind_grads(const std::vector<std::pair<Tensor, Tensor>>& grads, std::unordered_set<int>& roots) {
    std::unordered_set<int> forwarded;
    for (const auto& [param, grad] : grads) {
      auto it = buffer_of.find(grad.storage().get());
      FG_CHECK(it != buffer_of.end(), Value, "compile: the gradient of a parameter ", fg::describe(param),
               " was not computed by the traced step");
      int id = it->second;
      Buffer& b = plan.buffers_[id];
      Tensor target = Tensor::empty(param.shape(), param.dtype(), param.device());
      bool whole = grad.is_contiguous() && grad.offset() == 0 &&
                   static_cast<size_t>(grad.numel()) * itemsize(grad.dtype()) == b.bytes;
      if (b.kind == BufferKind::Arena && whole && grad.dtype() == param.dtype() && !forwarded.count(id)) {
        b.kind = BufferKind::External;  // the producing op writes .grad directly
        b.storage = target.storage();
        b.name = "grad(" + name_of(param) + ")";
        forwarded.insert(id);
        roots.insert(id);
      } else {  // a view, a shared or converted gradient: one copy at the end
        int dst = add_buffer(BufferKind::External, target, "grad(" + name_of(param) + ")");
        plan.buffers_[dst].written = true;
        const OpDef& copy = op_def(OpId::contiguous);
        Instruction ins{&copy, {}, {value_of(grad, id)}, {value_of(target, dst)}};
        FG_CHECK(grad.dtype() == param.dtype(), DType, "compile: the gradient of ", name_of(param), " is ",
                 dtype_name(grad.dtype()), ", the parameter ", dtype_name(param.dtype()));
        plan.code_.push_back(std::move(ins));
        roots.insert(dst);
      }
      set_grad(param, target);
    }
  }

  std::string name_of(const Tensor& t) const {
    auto it = names.find(t.storage().get());
    return it != names.end() ? it->second : fg::describe(t);
  }

  // Keeps an instruction when it writes memory outside the plan or a buffer read later.
  void eliminate_dead_code(std::unordered_set<int> needed) {
    std::vector<bool> keep(plan.code_.size(), false);
    for (size_t i = plan.code_.size(); i-- > 0;) {
      const Instruction& ins = plan.code_[i];
      bool side_effect = mutates_inputs(*ins.op);
      for (const Value& v : ins.out)
        side_effect |= needed.count(v.buffer) || plan.buffers_[v.buffer].kind != BufferKind::Arena;
      if (!side_effect) continue;
      keep[i] = true;
      for (const Value& v : ins.in) needed.insert(v.buffer);
    }
    std::vector<Instruction> kept;
    for (size_t i = 0; i < plan.code_.size(); ++i)
      if (keep[i]) kept.push_back(std::move(plan.code_[i]));
    plan.stats_.eliminated = static_cast<int>(plan.code_.size() - kept.size());
    plan.code_ = std::move(kept);
  }

  void fold_transposes(const std::vector<Value>& outputs) {
    std::vector<int> uses(plan.buffers_.size(), 0), producer(plan.buffers_.size(), -1);
    for (size_t i = 0; i < plan.code_.size(); ++i) {
      for (const Value& v : plan.code_[i].in) ++uses[v.buffer];
      for (const Value& v : plan.code_[i].out) producer[v.buffer] = static_cast<int>(i);
    }
    for (const Value& v : outputs) ++uses[v.buffer];
    auto transposed = [](Value v) {
      std::swap(v.shape[0], v.shape[1]);
      std::swap(v.strides[0], v.strides[1]);
      return v;
    };
    std::vector<bool> drop(plan.code_.size(), false);
    for (size_t i = 0; i < plan.code_.size(); ++i) {
      Instruction& copy = plan.code_[i];
      if (copy.op->id != OpId::contiguous || copy.in[0].shape.size() != 2) continue;
      const Value& v = copy.in[0];
      int m = producer[v.buffer];
      if (m < 0 || uses[v.buffer] != 1 || plan.code_[m].op->id != OpId::matmul) continue;
      Instruction& mm = plan.code_[m];
      const Value& r = mm.out[0];
      bool is_transpose = r.shape.size() == 2 && v.offset == r.offset && v.shape == transposed(r).shape &&
                          v.strides == transposed(r).strides && r.strides == contiguous_strides(r.shape);
      if (!is_transpose || mm.in[0].shape.size() != 2 || mm.in[1].shape.size() != 2) continue;
      mm.in = {transposed(mm.in[1]), transposed(mm.in[0])};
      mm.out = copy.out;
      drop[i] = true;
      ++plan.stats_.transposes;
    }
    std::vector<Instruction> kept;
    for (size_t i = 0; i < plan.code_.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(plan.code_[i]));
    plan.code_ = std::move(kept);
  }

  // A host read of a value the plan computes would freeze a data-dependent decision.
  void check_host_reads() {
    for (const auto& [t, what] : trace.host_reads) {
      auto it = buffer_of.find(t.storage().get());
      bool computed = it != buffer_of.end() && !plan.buffers_[it->second].constant &&
                      (plan.buffers_[it->second].written || plan.buffers_[it->second].kind == BufferKind::Input);
      FG_CHECK(!computed, Value, host_read_message(t, what));
    }
  }
};

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Update: return "optimizer";
  }
  return "?";
}

Plan::Plan(Tracer& trace, const PlanSpec& spec) {
  trace.stop();
  Builder b{*this, trace};
  for (const auto& [name, t] : spec.names) b.names.emplace(t.storage().get(), name);
  FG_CHECK(!spec.outputs.empty() || !spec.grads.empty() || !trace.calls.empty(), Value,
           "compile: the traced step ran no op");
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const Tensor& x = spec.inputs[i];
    FG_CHECK(!b.buffer_of.count(x.storage().get()), Value, "compile: input ", i, " shares memory with an earlier input");
    int id = b.add_buffer(BufferKind::Input, x, "x" + std::to_string(i));
    buffers_[id].bytes = static_cast<size_t>(x.numel()) * itemsize(x.dtype());
    inputs_.push_back({id, 0, x.shape(), contiguous_strides(x.shape()), x.dtype()});
    input_t_.push_back(x);  // the traced example, for shapes and dtypes until bound
  }
  Stopwatch clock;
  for (size_t i = 0; i < trace.calls.size(); ++i) {
    const TracedCall& c = trace.calls[i];
    ++stats_.traced;
    if (c.op && c.op->in(Group::View)) ++stats_.views;
    b.record(c, i >= trace.update_start     ? Phase::Update
                : i >= trace.backward_start ? Phase::Backward
                                            : Phase::Forward);
  }
  origins_ = std::move(trace.origins);
  auto pass = [&](const char* name, const std::function<void()>& run) {
    auto before = static_cast<int64_t>(code_.size());
    run();
    passes_.emplace_back(name, before, static_cast<int64_t>(code_.size()));
    pass_ms_.emplace_back(name, clock.lap_ms());
  };
  passes_.emplace_back("trace", stats_.traced, static_cast<int64_t>(code_.size()));
  pass_ms_.emplace_back("trace", clock.lap_ms());
  std::unordered_set<int> roots;
  for (const Tensor& out : spec.outputs) {
    Value v = b.read(out, [] { return std::string("an output of the step"); });
    outputs_.push_back(v);
    roots.insert(v.buffer);
  }
  pass("cse", [&] { b.eliminate_common_subexpressions(outputs_); });
  roots.clear();
  for (const Value& v : outputs_) roots.insert(v.buffer);
  pass("constant folding", [&] { b.fold_constants(); });
  pass("gradient binding", [&] { b.bind_grads(spec.grads, roots); });
  pass("dead code", [&] { b.eliminate_dead_code(roots); });
  pass("transpose folding", [&] { b.fold_transposes(outputs_); });
  guard_updates(code_, branches_, buffers_.size());
  stats_.branches = static_cast<int>(branches_.size());
  b.check_host_reads();
  device_ = spec.inputs.empty() ? (trace.calls.empty() ? Device{} : trace.calls[0].out.empty() ? Device{}
                                                                   : trace.calls[0].out[0].device())
                                : spec.inputs[0].device();
  for (const Instruction& ins : code_)
    FG_CHECK(device_.is_cpu() || ins.op->cuda, Device, "compile: '", ins.op->name, "' has no kernel for ",
             device_.str(), " (", cuda_missing_reason(*ins.op), ")");
  for (const Buffer& buf : buffers_)
    FG_CHECK(buf.device == device_ || buf.kind == BufferKind::External, Device, "compile: the step mixes ",
             device_.str(), " and ", buf.device.str(), " (", buf.name, ")");
  for (const Tensor& t : spec.watch) watched_.emplace_back(t, t.storage());
  rng_advance_ = static_cast<int64_t>(trace.rng_end.offset - trace.rng_start.offset);
  poison_ = env::plan_debug();
  auto before = static_cast<int64_t>(code_.size());
  fuse();
  int64_t kernels = static_cast<int64_t>(runs_.size());
  for (const Instruction& ins : code_) kernels += ins.run < 0;
  passes_.emplace_back("fusion", before, kernels);
  pass_ms_.emplace_back("fusion", clock.lap_ms());
  plan_memory();
  check_memory();
  pass_ms_.emplace_back("memory", clock.lap_ms());
  bind();
  pass_ms_.emplace_back("bind", clock.lap_ms());
  trace.calls.clear();
  trace.host_reads.clear();
}

}  // namespace fg::plan
