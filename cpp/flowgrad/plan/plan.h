// Compiled plans: a traced step (forward, loss, backward, optimizer update) as a flat list of
// kernel calls over buffers whose bytes are planned once in one arena per device.
//
// Pipeline: trace.cpp records every run_op call while a step is traced once on shape-only
// tensors (no kernel runs but those that make folded constants; see set_shape_only_trace);
// build.cpp turns the calls into a Program (program.h: buffers as declarations, instructions,
// regions with blocks, fused runs as instructions); passes/ map Program to Program (one table,
// pipeline.cpp); memory.cpp plans the arena from the def/use analysis (analysis.h) and an
// independent checker proves it; lower.cpp binds the result to memory and kernels as a Plan,
// which plan.cpp executes and prints.
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
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "flowgrad/core/allocator.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/graph/control_flow.h"
#include "flowgrad/nn/call_scope.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/registry.h"
#include "flowgrad/plan/memory.h"
#include "flowgrad/plan/program.h"

namespace fg::plan {

// ---- tracing ----

// Data-dependent control flow in a plan (branch.cpp runs it). Each kind is one conditional
// region a CUDA graph can hold as a conditional node: Switch -> IF/SWITCH node, loops -> WHILE.
enum class BranchKind : uint8_t {
  Switch,        // runs blocks[selector]
  While,         // blocks {halt, body}: while halt <= 0 and fewer than max_iter iterations: body
  Until,         // blocks {body, halt}: body, then stop once halt > 0 (or after max_iter)
  LoopBackward,  // blocks {body backward}: for k = count - 1 .. 0, on the k-th saved body input
  Guard,         // blocks {update}: runs when a listed branch took a listed block (optimizer
                 // updates of parameters whose gradient only a branch computes)
};
const char* branch_kind_name(BranchKind kind);

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
  Tensors zeroed;  // LoopBackward: accumulators cleared before the first iteration
  std::shared_ptr<TracedBranch> loop;  // LoopBackward: its forward loop
  int id = -1;      // set by the builder
};

// While alive, records every op call (from any thread) and every host read of a tensor, with
// run_op tracing shapes only (set_shape_only_trace: a host read of a shape-only value raises), and
// traces switch and while_/until of FlowBuilder graphs as branches (branch_trace.cpp). Also
// keeps which module each call came from (as a module call observer) and the source line
// `locate` gives at each op and module call (the bindings read the Python stack when the calling
// thread holds the interpreter; "" keeps the last line, e.g. inside a C++ layer).
class Tracer : public OpObserver, public graph::ControlFlow, public nn::CallObserver {
 public:
  Tracer();
  ~Tracer() override;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  void stop();  // stops recording (idempotent)

  void on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) override;
  void on_host_read(const Tensor& t, const char* what) override;
  Tensor run_switch(const graph::SwitchCall& c) override;
  Tensor run_loop(const graph::LoopCall& c) override;
  void enter(const nn::Module& m) override;
  void leave() override;

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
  std::unordered_map<const nn::Module*, std::string> module_names;  // labels for Origin::module
  std::vector<Origin> origins;
  // The origin of the forward call that made each autograd node: its backward ops take it.
  std::unordered_map<const void*, int> node_origins;
  std::function<std::string()> locate;
  void note_source();  // asks locate now (e.g. before a call that runs ops without the interpreter)
  RngState rng_start, rng_end;

 private:
  Tensors switch_backward(const std::shared_ptr<TracedBranch>& forward, const Tensors& xs, const Tensors& ys,
                         const std::vector<Tensors>& params, const Tensors& all_params, const Tensor& grad);
  Tensors loop_backward(const std::shared_ptr<TracedBranch>& forward, const graph::LoopCall& c,
                        const Tensors& params, const Tensor& grad);

  bool active_ = true;
  std::mutex mutex_;
  std::vector<std::vector<TracedCall>> open_;  // blocks being traced, innermost last
  graph::ControlFlow* previous_ = nullptr;
  std::optional<ModeGuard> trace_mode_;  // this tracer on the trace stack while active
  nn::CallObserver* previous_observer_ = nullptr;
  std::string source_;
  int origin();  // the current origin's index (under mutex_)
  void relocate();  // source_ from locate (under mutex_)
};

// Why a host read of t's values inside a compiled step raises.
std::string host_read_message(const Tensor& t, const std::string& what);

// ---- the plan: what lowering (lower.cpp) makes of a Program ----

// A lowered buffer: its declaration, its memory plan and its memory.
struct Buffer : BufferDecl {
  std::shared_ptr<Storage> storage{};  // External: the owner's; others: bound after planning
  int first = -1, last = -1;     // times that first and last touch it (-1: before the plan; memory.h)
  int64_t offset = 0;            // Arena / Input: bytes from the arena's start
  bool written = false;          // some instruction writes it
  bool local = false;            // lives only inside a fused run: per-tile scratch, no arena bytes
};

struct Branch;
// Members past `op` have default initializers, so a braced `{op, attrs, in, out}` may stop early.
struct Instruction {
  const OpDef* op;  // null for a region's record (`branch` is set)
  Attrs attrs;
  std::vector<Value> in{}, out{};
  int64_t rng_delta = -1;  // random ops: counters from the step's first draw
  Phase phase = Phase::Forward;
  int origin = -1;         // index into Plan::origins()
  int run = -1;            // the fused run it belongs to (fusion.cpp)
  Tensors in_t{}, out_t{};  // bound to planned memory: the executor's arguments
  Launch launch{};         // the kernel call over in_t/out_t, prepared once (see prepare_launch)
  std::vector<int> released{};  // buffers whose last use is this instruction (debug poisoning)
  std::shared_ptr<Branch> branch{};  // set for a branch instruction: `in`/`out` list every outer
                                     // buffer its blocks read/write
};

// A lowered region: its IR state (program.h), its blocks lowered, and what runs bind to. The
// executor reads the decision (selector, halt, count) on the host; `conditional` names the CUDA
// conditional node the region maps to once plans are captured (needs a device-side decision).
struct Branch : Region {
  BranchKind kind;
  std::vector<std::vector<Instruction>> blocks;
  // bound by Plan::bind
  Tensor selector_t, init_t, carried_t, count_t, step_input_t;
  Tensors stash_rows, zeroed_t;
  int taken = -1;  // last run: the block a switch took, 0 when a loop ran its body at least once
  std::vector<int64_t> runs;  // per block: how many runs took it (switch, guard) or iterations (loops)
  const char* conditional() const;  // "IF", "SWITCH", "WHILE" or "IF" (guard)
};

// A generated CUDA kernel computing one fused run (cuda_fusion.cpp).
struct FusedKernel {
  std::string name, source;
  std::vector<int> params;  // the buffer each pointer parameter points at (its start), in order
  int64_t numel = 0;        // elements of the run: the kernel's loop bound
};
// The CUDA source of one kernel computing Fused instruction `run` of `p`, whose buffers in
// `local` live in registers only (raises for an op it cannot generate).
FusedKernel fused_kernel(const Program& p, const Instr& run, const std::vector<bool>& local, const std::string& name);
// NVRTC (opened on first use): whether it can be used, else why not; the architectures it can
// make SASS for; PTX for compute_<arch>.
bool nvrtc_available(std::string* why);
std::vector<int> nvrtc_archs();
std::string compile_ptx(const std::string& source, const std::string& name, int arch);
// A fused kernel compiled for a GPU of architecture `arch`: a CUBIN when NVRTC knows the
// architecture, else PTX for the newest one it knows below it. `target` says which.
struct FusedBinary {
  std::string image, target;  // target: "CUBIN for sm_90", "PTX for compute_90"
};
FusedBinary compile_fused(const std::string& source, const std::string& name, int arch);
// Why fused runs cannot run on CUDA here ("" when they can: NVRTC and the driver were found).
std::string cuda_fusion_unavailable();
int cuda_arch(int device);  // of cuda:<device>: 80, 90, ...
// Loads a compiled kernel into cuda:<device>'s primary context (the runtime's), and binds it to
// one device pointer per parameter. Loading raises DeviceError on any driver failure.
std::shared_ptr<const void> load_fused(int device, const FusedKernel& kernel, const FusedBinary& binary);
Launch bind_fused(const std::shared_ptr<const void>& loaded, const FusedKernel& kernel,
                  const std::vector<void*>& pointers);
// Fault injection for tests: an image that is no module at load, a 0-block grid at launch (the real
// driver call fails, and the run falls back), or launches on the legacy stream (review finding
// F1: the capture self-check must refuse the graph).
enum class FusedFault { None, Load, Launch, LegacyStream };
void set_fused_fault(FusedFault fault);

// A run of elementwise instructions executed tile by tile (fusion.cpp).
struct TileCall {
  Tensors in, out;
  Launch launch;
};
struct FusedRun {
  int first, last;  // instructions [first, last]
  Dims shape;       // the shape every instruction of the run writes
  int split = 1;    // tiles are ranges of shape[0:split] flattened ("rows")
  std::vector<int> local;  // buffers kept in per-worker tile scratch
  int workers = 1;
  std::vector<std::vector<TileCall>> tiles;  // [tile][instruction - first]
  // CUDA plans: one generated kernel for the whole run (cuda_fusion.cpp), compiled and loaded
  // when lowering (a failure unfuses the run) and bound to the arena with the plan.
  FusedKernel kernel;
  std::shared_ptr<const void> loaded;
  Launch launch;
};

class Capture;  // CUDA graph capture of a plan (capture.h)

// The op's name, or a region record's kind ("switch", "while", ...).
const char* op_name(const Instruction& ins);

// A tensor with the layout `v` over `storage` (no autograd identity).
Tensor layout(const std::shared_ptr<Storage>& storage, const Value& v);

// The one place a plan turns an op call over bound tensors into a launch: the op's prepared
// launch when it has one for `device`, else a record that calls its cpu/cuda kernel. `attrs` is
// read at every launch (random ops move their counter in it), so it must outlive the launch.
Launch prepare_launch(const OpDef& op, Device device, const Tensors& in, const Tensors& out, const Attrs& attrs,
                      bool attrs_change);

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
  // Filled by Plan::stats() from the program and its capture:
  int64_t instructions = 0, kernels = 0, fused_runs = 0;  // a fused run is one kernel per tile pass
  int64_t cuda_graph_replays = 0;
  bool poisons = false;  // FLOWGRAD_DEBUG_PLAN: poisoned_bytes is reported
  std::vector<std::pair<int64_t, std::string>> allocating_ops;  // (instruction, op name)

  // Everything by the names fg.compile's step.stats uses ("views_folded", "arena_bytes", ...).
  std::map<std::string, StatValue> to_map() const;
};

// What the caller declares about a traced step.
struct PlanSpec {
  Tensors inputs;   // copied into input slots on every run
  Tensors outputs;  // returned (as fresh tensors) by every run
  std::vector<std::pair<Tensor, Tensor>> grads;  // (parameter, traced gradient): bound to .grad
  std::vector<std::pair<std::string, Tensor>> names;  // labels for external tensors (parameters)
  Tensors watch;  // tensors whose storage must not change (else the plan is stale)
  // Optional, one per grads pair: the tensor to write that gradient into (another plan's, so plans
  // of one step share them); an undefined or unfit one (shape, dtype, device, layout) gets a fresh one.
  Tensors grad_targets{};
};

class Plan {
 public:
  Plan(Tracer& tracer, const PlanSpec& spec);

  // Runs the plan on new inputs (same shapes and dtypes as traced); returns the outputs.
  Tensors run(const Tensors& inputs);
  // The same, also writing each instruction's milliseconds into *ms (capture.h: Capture::profile).
  Tensors run_profiled(const Tensors& inputs, std::vector<double>* ms);
  // The capture self-check's comparison on any device (capture.h): one plain step, then the same
  // step again from the same state followed by `after` (a side effect to plant a difference);
  // "" when both leave the same state. Applies exactly one step either way.
  std::string check_step(const Tensors& inputs, const std::function<void()>& after);
  // False once a watched tensor's storage changed (Module.to, parameter reassignment).
  bool up_to_date() const;
  // Throws unless no two arena buffers with overlapping lifetimes share bytes.
  void check_memory() const;
  // The arena: the intermediates' and inputs' bytes. Plans that never run at the same time may
  // share one: bind_arena rebinds every arena buffer, launch and fused run onto `arena` (at least
  // stats().arena_bytes on the plan's device) and starts the CUDA graph capture over.
  const std::shared_ptr<Storage>& arena() const { return arena_; }
  void bind_arena(std::shared_ptr<Storage> arena);

  const std::vector<Instruction>& instructions() const { return code_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  PlanStats stats() const;  // the build's counts plus those of the program and its capture
  Device device() const { return device_; }
  bool poisons() const { return poison_; }  // FLOWGRAD_DEBUG_PLAN was set when it was built
  std::string str() const;
  std::string dot() const;
  std::string describe(const Value& v) const;  // "%12 float32 (64, 512)"
  const Capture& capture() const { return *capture_; }
  const std::vector<FusedRun>& runs() const { return runs_; }
  const std::vector<Origin>& origins() const { return origins_; }
  // What each pass did: (pass, instructions before, after); "fusion" counts kernels after.
  const std::vector<std::tuple<std::string, int64_t, int64_t>>& passes() const { return passes_; }
  // Milliseconds each stage of the build took: the passes above, then memory planning and binding.
  const std::vector<std::pair<std::string, double>>& pass_ms() const { return pass_ms_; }
  // The CUDA source of one kernel computing fused run `run` (raises for an op it cannot generate).
  FusedKernel fused_kernel(int run, const std::string& name) const;
  const Program& program() const { return program_; }  // what was lowered

 private:
  friend class Capture;
  Tensors run_with(const Tensors& inputs, std::vector<double>* ms);
  void load_inputs(const Tensors& inputs);  // checked against the signature, copied into their slots
  void draw_rng();  // random instructions take this run's seed and counters
  // The instructions in order on the current stream; `progress(i)` is called before each (capture).
  void execute(const std::function<void(int)>* progress = nullptr);
  void run_code(std::vector<Instruction>& code, const std::function<void(int)>* progress);
  // lower.cpp: the program bound to memory and kernels
  void lower(Program program, std::vector<std::shared_ptr<Storage>> storages, const PlanSpec& spec);
  void compile_cuda_runs(Program& program);
  void lower_block(const Block& block, std::vector<Instruction>& out, int& time);
  void bind();  // onto arena_ (allocated when unset)
  void bind_runs();
  void bind_instruction(Instruction& ins);
  void execute_run(FusedRun& run);
  void unfuse(FusedRun& run, const std::string& why);
  void poison(const std::vector<int>& released);
  void run_branch(Instruction& ins);  // branch.cpp
  void run_block(Branch& b, size_t index);
  void bind_branch(Branch& b);
  void str_block(std::ostream& os, const std::vector<Instruction>& code, const std::string& indent) const;
  void dot_block(std::ostream& os, const std::vector<Instruction>& code, std::vector<std::string>& producer,
                 const std::string& prefix) const;

  Device device_;
  std::vector<Buffer> buffers_;
  std::vector<Instruction> code_;
  std::vector<FusedRun> runs_;
  std::vector<std::shared_ptr<Branch>> branches_;  // by id
  std::vector<Value> inputs_, outputs_;
  Tensors input_t_, output_t_;
  std::vector<std::pair<Tensor, std::shared_ptr<Storage>>> watched_;
  std::shared_ptr<Storage> arena_;
  // Temporaries of kernel wrappers: the first run measures the most one kernel needs, later runs
  // take them from this block (see KernelScratch), so a warm plan allocates nothing.
  KernelScratch scratch_;
  std::shared_ptr<Storage> scratch_block_;
  // What every launch of a run gets (execute fills it): the stream the run is queued on, the
  // scratch above, and the device Philox pair while a capture records the run.
  KernelEnv env_;
  int64_t rng_advance_ = 0;
  bool poison_ = false;
  PlanStats stats_;
  std::vector<Origin> origins_;
  std::vector<std::tuple<std::string, int64_t, int64_t>> passes_;
  Program program_;
  MemoryPlan memory_;
  std::vector<FusedKernel> kernels_;  // CUDA: per Fused instruction of program_'s body, in order
  std::vector<std::shared_ptr<const void>> loaded_;
  std::vector<std::pair<std::string, double>> pass_ms_;
  std::shared_ptr<Capture> capture_;  // made in bind()
};

// Binds both plans onto the larger of their arenas (they must not run at the same time).
void share_arena(Plan& a, Plan& b);

// Copies of tensors' values, and writing them back (the CUDA graph capture self-check runs a step
// and restores the state it touched).
Tensors snapshot(const Tensors& tensors);
void restore(const Tensors& tensors, const Tensors& copies);

}  // namespace fg::plan
