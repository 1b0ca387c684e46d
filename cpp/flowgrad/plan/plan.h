// Compiled plans: a traced step (forward, loss, backward, optimizer update) as a flat list of
// kernel calls over buffers whose bytes are planned once in one arena per device.
//
// Pipeline: trace.cpp records every run_op call while a step is traced once on shape-only
// tensors (no kernel runs but those that make folded constants; see Tracer::dispatch);
// build.cpp turns the calls into a Program (program.h: buffers as declarations, instructions,
// regions with blocks, fused runs as instructions); passes/ map Program to Program (one table,
// pipeline.cpp); memory.cpp plans the arena from the def/use analysis (analysis.h) and an
// independent checker proves it; lower.cpp binds the result to memory and kernels as an
// Executable (executable.h, executable.cpp runs it); Plan is the façade that builds, counts and
// prints it (plan.cpp).
//
// Execution replays launch records (Launch, prepared once when lowering): no shape rule, dtype
// dispatch or attribute lookup per call. Fused elementwise runs execute tile by tile on the CPU
// (fusion.cpp), and on CUDA as one kernel per run generated and compiled with NVRTC when
// lowering (cuda_fusion.cpp; a run that fails to compile runs unfused): a run's ops, dtypes and
// layouts are fixed by then, so generated code bakes them in, from the same functors.h text that
// the CPU and CUDA kernels compile.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "flowgrad/core/runtime.h"
#include "flowgrad/graph/control_flow.h"
#include "flowgrad/nn/call_scope.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/registry.h"
#include "flowgrad/ops/rng.h"
#include "flowgrad/plan/executable.h"
#include "flowgrad/plan/memory.h"
#include "flowgrad/plan/program.h"

namespace fg::plan {

// ---- tracing ----

// Where a traced call came from: the innermost named module running it (its dotted path from
// the compiled model, FlowBuilder nodes as "3[tag]") and the user's source line ("file.py:12").
struct Origin {
  std::string module, source;
};

struct TracedBranch;
struct TracedCall {
  const OpDef* op;  // null for a branch
  Attrs attrs;
  Tensors in, out;
  std::shared_ptr<TracedBranch> branch;
  int origin = -1;  // index into Tracer::origins
};

// What a block leaves behind: `value` copied (or added) into `target`, a buffer the branch owns;
// an undefined value writes zeros (copy) or adds nothing.
struct TracedResult {
  Tensor value, target;
  bool accumulate = false;
};

struct TracedBranch {
  BranchKind kind;
  std::string label;
  int64_t max_iter = 0;
  Tensor selector;  // Switch: the branch index; loops: the halt block's one-element result
  std::vector<std::vector<TracedCall>> blocks;
  std::vector<std::vector<TracedResult>> results;  // per block
  Tensors owned;  // buffers the branch writes (outputs, carried values, stash, count)
  // Loops: the carried value starts as `init` (x forward, the output's gradient backward); the
  // forward saves each iteration's input in `stash` and the iteration count in `count`.
  Tensor init, carried, stash, count, step_input;
  // Loops whose blocks draw: the iteration the executor writes before each block, which their
  // random streams derive from (ops/rng.h); undefined when no block draws.
  Tensor iteration;
  Tensors zeroed;  // LoopBackward: accumulators cleared before the first iteration
  std::shared_ptr<TracedBranch> loop;  // LoopBackward: its forward loop
  int id = -1;      // set by the builder
};

// While alive, the innermost trace mode of the thread that made it (one ModeGuard): records every
// op call and every host read of a tensor on that thread, with run_op tracing shapes only
// (dispatch: a host read of a shape-only value raises), and traces switch and while_/until of
// FlowBuilder graphs as branches (branch_trace.cpp; graphs find it as their ControlFlow). Also
// keeps which module each call came from (nn finds it as the CallObserver) and the source line
// `locate` gives at each op and module call (the bindings read the Python stack when the calling
// thread holds the interpreter; "" keeps the last line, e.g. inside a C++ layer). Other threads'
// ops are neither traced nor affected.
class Tracer : public OpObserver, public graph::ControlFlow, public nn::CallObserver, public RngSource {
 public:
  Tracer();
  ~Tracer() override;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  void stop();  // stops recording (idempotent); on the thread that made the tracer

  Dispatch dispatch(const OpDef& op, TensorList in) override;
  void on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) override;
  void on_host_read(const Tensor& t, const char* what) override;
  Tensor run_switch(const graph::SwitchCall& c) override;
  Tensor run_loop(const graph::LoopCall& c) override;
  void enter(const nn::Module& m) override;
  void leave() override;
  RngDraw pair_at(RngState at, Device device) override;
  void on_derived(RngState base, uint64_t key, const Tensor& index, RngState derived) override;

  // Calls go to a new block until end_block returns them.
  void begin_block();
  std::vector<TracedCall> end_block();
  void add_branch(std::shared_ptr<TracedBranch> branch);
  bool active() const { return active_; }

  std::vector<TracedCall> calls;
  std::vector<std::pair<Tensor, std::string>> host_reads;  // the tensor and what read it
  uint64_t first_serial;  // storages with a serial >= this were made during the trace
  size_t backward_start = SIZE_MAX;  // calls from here on belong to the backward pass
  size_t update_start = SIZE_MAX;    // calls from here on are the optimizer's update
  // [begin, end) ranges of calls that update one parameter (its instructions get Instr::scope).
  std::vector<std::pair<size_t, size_t>> update_scopes;
  std::unordered_map<const nn::Module*, std::string> module_names;  // labels for Origin::module
  std::vector<Origin> origins;
  // The origin of the forward call that made each autograd node: its backward ops take it.
  std::unordered_map<const void*, int> node_origins;
  std::function<std::string()> locate;
  void note_source();  // asks locate now (e.g. before a call that runs ops without the interpreter)
  RngState rng_start, rng_end;
  // The step's {seed, base} pair (the plan's "philox" buffer): what the generator holds at
  // rng_start when the plan runs. Undefined when the step draws nothing.
  Tensor philox;

 private:
  // A stream derived while tracing (derive_stream), by its seed, and the pair tensor made for it in
  // a block (valid in that block and the blocks inside it).
  struct DerivedStream {
    RngState base;
    uint64_t key;
    Tensor index;
    Tensor pair;
    uint64_t block = 0;
  };
  Tensor derived_pair(DerivedStream& s, Device device);
  bool reads_index(const Tensor& index) const;  // whether a derived pair read this loop iteration
  bool in_open_block(uint64_t block) const;
  std::unordered_map<uint64_t, DerivedStream> derived_;
  std::vector<uint64_t> open_ids_;  // per open block: its number (0 is the top level)
  uint64_t blocks_made_ = 0;
  std::unordered_set<const Storage*> indices_read_;  // loop iterations a derived pair read

  Tensors switch_backward(const std::shared_ptr<TracedBranch>& forward, const Tensors& xs, const Tensors& ys,
                         const std::vector<Tensors>& params, const Tensors& all_params, const Tensor& grad);
  Tensors loop_backward(const std::shared_ptr<TracedBranch>& forward, const graph::LoopCall& c,
                        const Tensors& params, const Tensor& grad);

  bool active_ = true;
  std::vector<std::vector<TracedCall>> open_;  // blocks being traced, innermost last
  std::optional<ModeGuard> trace_mode_;  // this tracer on its thread's trace stack while active
  std::vector<const nn::Module*> modules_;  // the modules running, innermost last
  std::string source_;
  int origin();  // the current origin's index
  void relocate();  // source_ from locate
};

// Why a host read of t's values inside a compiled step raises.
std::string host_read_message(const Tensor& t, const std::string& what);

// One entry of PlanStats::to_map(): a count, a description, or (instruction, op name) pairs.
using StatValue = std::variant<int64_t, std::string, std::vector<std::pair<int64_t, std::string>>>;

struct PlanStats {
  int branches = 0;
  size_t poisoned_bytes = 0;  // FLOWGRAD_DEBUG_PLAN: bytes filled with NaN so far
  int traced = 0, views = 0, folded = 0, eliminated = 0, common = 0, fused = 0, transposes = 0;
  size_t arena_bytes = 0, naive_bytes = 0;
  std::string cuda_graph;
  std::string cuda_fusion;  // CUDA plans: how fused runs execute, or why they are not fused
  uint64_t allocations = 0;             // storages the last run's instructions allocated (should be 0)
  std::vector<int> allocating;          // instructions of the last run that allocated
  int64_t host_syncs = 0;               // host waits on the GPU during the last run (0 on the CPU)
  int64_t philox_writes = 0;            // runs so far before which the host wrote the {seed, base} pair
  int64_t inputs_copied = 0;            // inputs the last run copied into the arena (Executable::load_inputs)
  // Filled by Plan::stats() from the executable and its capture (with the run counts above):
  int64_t instructions = 0, kernels = 0, fused_runs = 0;  // a fused run is one kernel per tile pass
  int64_t cuda_graph_replays = 0;
  bool poisons = false;  // FLOWGRAD_DEBUG_PLAN: poisoned_bytes is reported
  std::vector<std::pair<int64_t, std::string>> allocating_ops;  // (instruction, op name)

  // Everything by the names fg.compile's step.stats uses ("views_folded", "arena_bytes", ...).
  std::map<std::string, StatValue> to_map() const;
};

// The step's example inputs as the trace must see them. A plan gives each input a contiguous slot
// of its size, and the trace records a read at its place in the tensor's storage: an input that
// does not start its storage contiguously (a slice, a transposed batch) or that shares storage with
// `held` (parameters, buffers, optimizer state) or an earlier input is replaced by a copy of its
// own (requires_grad kept); the others are traced as they are (no kernel runs).
Tensors inputs_for_trace(const Tensors& inputs, const Tensors& held);

// What the caller declares about a traced step.
struct PlanSpec {
  Tensors inputs;   // their slots: each run reads the caller's tensor there, or in place (Executable)
  Tensors outputs;  // returned (as fresh tensors) by every run
  std::vector<std::pair<Tensor, Tensor>> grads;  // (parameter, traced gradient): bound to .grad
  std::vector<std::pair<std::string, Tensor>> names;  // labels for external tensors (parameters)
  Tensors watch;  // tensors whose storage must not change (else the plan is stale)
  // Optional, one per grads pair: the tensor to write that gradient into (another plan's, so plans
  // of one step share them); an undefined or unfit one (shape, dtype, device, layout) gets a fresh one.
  Tensors grad_targets{};
};

// The façade fg.compile holds: builds the Program from a trace, runs the passes, plans memory,
// lowers the result into an Executable (executable.h) that runs it, and prints and counts it.
class Plan {
 public:
  Plan(Tracer& tracer, const PlanSpec& spec);

  // Runs the plan on new inputs (same shapes and dtypes as traced); returns the outputs.
  Tensors run(const Tensors& inputs) { return exec_->run(inputs); }
  // The same, also writing each instruction's milliseconds into *ms (capture.h: Capture::profile).
  Tensors run_profiled(const Tensors& inputs, std::vector<double>* ms) { return exec_->run(inputs, ms); }
  // The capture self-check's comparison on any device (capture.h): one plain step, then the same
  // step again from the same state followed by `after` (a side effect to plant a difference);
  // "" when both leave the same state. Applies exactly one step either way.
  std::string check_step(const Tensors& inputs, const std::function<void()>& after) {
    return exec_->check_step(inputs, after);
  }
  // False once a watched tensor's storage changed (Module.to, parameter reassignment).
  bool up_to_date() const;
  // Throws unless no two arena buffers with overlapping lifetimes share bytes.
  void check_memory() const;
  // The arena: the intermediates' and inputs' bytes. Plans that never run at the same time may
  // share one: bind_arena rebinds every arena buffer, launch and fused run onto `arena` (at least
  // stats().arena_bytes on the plan's device) and starts the CUDA graph capture over.
  const std::shared_ptr<Storage>& arena() const { return exec_->arena(); }
  void bind_arena(std::shared_ptr<Storage> arena);

  const Executable& executable() const { return *exec_; }
  void view_outputs(std::vector<bool> which) { exec_->viewed_outputs = std::move(which); }  // Executable::viewed_outputs
  const std::vector<Instruction>& instructions() const { return exec_->instructions(); }
  const std::vector<Buffer>& buffers() const { return exec_->buffers(); }
  PlanStats stats() const;  // the build's counts plus those of the program and its capture
  Device device() const { return exec_->device(); }
  bool poisons() const { return exec_->poisons(); }  // FLOWGRAD_DEBUG_PLAN was set when it was built
  std::string str() const;
  std::string dot() const;
  std::string describe(const Value& v) const { return exec_->describe(v); }  // "%12 float32 (64, 512)"
  const Capture& capture() const { return exec_->capture(); }
  const std::vector<FusedRun>& runs() const { return exec_->runs(); }
  const std::vector<Origin>& origins() const { return origins_; }
  // What each pass did: (pass, instructions before, after); "fusion" counts kernels after.
  const std::vector<std::tuple<std::string, int64_t, int64_t>>& passes() const { return passes_; }
  // Milliseconds each stage of the build took: the passes above, then memory planning and binding.
  const std::vector<std::pair<std::string, double>>& pass_ms() const { return pass_ms_; }
  // The CUDA source of one kernel computing fused run `run` (raises for an op it cannot generate).
  FusedKernel fused_kernel(int run, const std::string& name) const;
  const Program& program() const { return program_; }  // what was lowered

 private:
  // lower.cpp: the program bound to memory and kernels
  void lower(Program program, Binding binding, const PlanSpec& spec);
  void compile_cuda_runs(Program& program, Binding& binding);
  void str_block(std::ostream& os, const std::vector<Instruction>& code, const std::string& indent) const;
  void dot_block(std::ostream& os, const std::vector<Instruction>& code, std::vector<std::string>& producer,
                 const std::string& prefix) const;

  std::vector<std::pair<Tensor, std::shared_ptr<Storage>>> watched_;
  PlanStats stats_;  // the build's counts (stats() adds the executable's)
  std::vector<Origin> origins_;
  std::vector<std::tuple<std::string, int64_t, int64_t>> passes_;
  std::vector<std::pair<std::string, double>> pass_ms_;
  Program program_;
  MemoryPlan memory_;
  std::unique_ptr<Executable> exec_;
};

// Binds both plans onto the larger of their arenas (they must not run at the same time).
void share_arena(Plan& a, Plan& b);

}  // namespace fg::plan
