// The executable step: what lowering (lower.cpp) makes of a Program (program.h) and its memory
// plan (memory.h) on one device. It owns the arena, the buffers bound to memory, one launch record
// per instruction (prepared once: no shape rule, dtype dispatch or attribute lookup per call),
// fused runs (CPU tiles, or one NVRTC kernel on CUDA), regions with their lowered blocks and run
// counters, the kernel scratch and the CUDA graph capture. One executor loop (run_code) runs
// the top level and every block. Plan (plan.h) is the façade that builds it and prints it;
// Capture (capture.h) drives it through the public interface below.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flowgrad/core/allocator.h"
#include "flowgrad/core/context.h"  // RngState
#include "flowgrad/ops/registry.h"
#include "flowgrad/plan/memory.h"
#include "flowgrad/plan/program.h"

namespace fg::plan {

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

// A lowered buffer: its declaration, its memory plan and its memory.
struct Buffer : BufferDecl {
  std::shared_ptr<Storage> storage{};  // External: the owner's; others: bound after planning
  int first = -1, last = -1;     // times that first and last touch it (-1: before the plan; memory.h)
  int64_t offset = 0;            // Arena / Input: bytes from the arena's start
  bool written = false;          // some instruction writes it
  bool local = false;            // lives only inside a fused run: per-tile scratch, no arena bytes
  int takes = -1;                // the buffer whose bytes it is written over (memory.h: in_place_pairs)
};

struct Branch;
// Members past `op` have default initializers, so a braced `{op, attrs, in, out}` may stop early.
struct Instruction {
  const OpDef* op;  // null for a region's record (`branch` is set)
  Attrs attrs;
  std::vector<Value> in{}, out{};
  Phase phase = Phase::Forward;
  int origin = -1;         // index into the trace's origins (Plan::origins)
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
  // bound by Executable::bind
  Tensor selector_t, init_t, carried_t, count_t, step_input_t, iteration_t;
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
// driver call fails, and the run falls back), launches on the legacy stream (review finding F1:
// the capture self-check must refuse the graph), or launches dropped while capturing, neither run
// nor counted (review G1: only the poisoned arena shows the captured graph lacks them).
enum class FusedFault { None, Load, Launch, LegacyStream, DropInCapture };
void set_fused_fault(FusedFault fault);

// A run of elementwise instructions executed tile by tile (fusion.cpp).
struct TileCall {
  Tensors in, out;
  Launch launch;
};
struct FusedRun {
  std::vector<Instruction>* code = nullptr;  // the block holding it: the top level or a region's
  int first = 0, last = 0;                   // instructions [first, last] of *code
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

// The op's name, or a region record's kind ("switch", "while", ...).
const char* op_name(const Instruction& ins);

// A tensor with the layout `v` over `storage` (no autograd identity).
Tensor layout(const std::shared_ptr<Storage>& storage, const Value& v);

// The one place a plan turns an op call over bound tensors into a launch: the op's prepared
// launch when it has one for `device`, else a record that calls its cpu/cuda kernel (which reads
// `attrs` at every launch, so it must outlive the launch).
Launch prepare_launch(const OpDef& op, Device device, const Tensors& in, const Tensors& out, const Attrs& attrs);

class Capture;  // CUDA graph capture of an executable (capture.h)

// What lowering binds besides the program and its memory plan.
struct Binding {
  std::vector<std::shared_ptr<Storage>> storages;  // per buffer: External memory (gradients' targets, the philox pair)
  bool poison = false;      // FLOWGRAD_DEBUG_PLAN
  // CUDA: per Fused instruction in program order (blocks included), its kernel loaded on the device
  std::vector<FusedKernel> kernels;
  std::vector<std::shared_ptr<const void>> loaded;
  std::string cuda_fusion;  // how fused runs execute, or why they are not fused
};

// What running changed: the plan's stats read these (PlanStats).
struct RunStats {
  size_t poisoned_bytes = 0;     // FLOWGRAD_DEBUG_PLAN: bytes filled with NaN so far
  uint64_t allocations = 0;      // storages the last run's instructions allocated (should be 0)
  std::vector<int> allocating;   // top-level instructions of the last run that allocated
  int64_t host_syncs = 0;        // host waits on the GPU during the last run (0 on the CPU)
  int64_t philox_writes = 0;     // runs so far before which the host wrote the {seed, base} pair
  int64_t inputs_copied = 0;     // inputs the last run copied into the arena (the rest it read in place)
  std::string cuda_fusion;       // Binding::cuda_fusion, plus runs that fell back at launch
};

class Executable {
 public:
  // Lowers `program` (after the passes and CUDA kernel compilation) with `memory` (its plan).
  Executable(const Program& program, const MemoryPlan& memory, Binding binding);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // One step on new inputs (checked against the traced signature); returns fresh output tensors.
  // With `ms`, each top-level instruction's milliseconds too (Capture::profile).
  Tensors run(const Tensors& inputs, std::vector<double>* ms = nullptr);
  // Fills every arena byte that holds an intermediate (not an input slot) and the kernel scratch
  // with 0xFF, NaN in every float type, so a step that reads an intermediate no instruction of it
  // wrote shows it. The capture self-check does this before the step it compares (review G1).
  void poison_intermediates();
  // Plan::check_step: the capture self-check's comparison of two plain steps.
  std::string check_step(const Tensors& inputs, const std::function<void()>& after);
  // Rebinds every arena buffer, launch and fused run onto `arena` and starts capture over.
  void bind_arena(std::shared_ptr<Storage> arena);
  const std::shared_ptr<Storage>& arena() const { return arena_; }

  // The step for Capture and the capture self-check: the instructions in order on the plan's device; `progress(i)` is called before each top-level one.
  void execute(const std::function<void(int)>* progress = nullptr);

  Device device() const { return device_; }
  bool poisons() const { return poison_; }
  const std::vector<Instruction>& instructions() const { return code_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<FusedRun>& runs() const { return runs_; }
  const std::vector<Value>& inputs() const { return inputs_; }
  // Why every call copies input i into the arena; "" when a call reads it in place if the caller's
  // tensor is contiguous, 64-byte aligned and overlaps nothing the step writes.
  const std::string& input_copied_because(size_t i) const { return in_place_[i].copied_because; }
  const std::vector<Value>& outputs() const { return outputs_; }
  const Tensors& output_tensors() const { return output_t_; }  // the outputs' slots in the arena
  const Capture& capture() const { return *capture_; }
  const RunStats& run_stats() const { return run_stats_; }
  // Outputs run() returns as views of their arena bytes instead of copies (true at their index):
  // the caller then owns those bytes until it drops the views, and binds a fresh arena before a
  // run while they live (AutogradPlan hands a forward's saved tensors to its backward, and its
  // backward's gradients to autograd, this way).
  std::vector<bool> viewed_outputs;
  std::string describe(const Value& v) const;  // "%12 float32 (64, 512)"

 private:
  void lower_block(const Block& block, std::vector<Instruction>& out, int& time, const MemoryPlan& memory,
                   const Binding& binding);
  // Checks the inputs against the traced signature and puts each where the step reads it: the
  // caller's own bytes when the input can be read in place (point_input), else a copy into its slot.
  void load_inputs(const Tensors& inputs);
  // Makes the plan read input `i` from `x`'s bytes (undefined `x`: from its arena slot again),
  // re-preparing the launches that read it when that changes.
  void point_input(size_t i, const Tensor& x);
  bool reads_in_place(size_t i, const Tensor& x) const;
  void find_in_place_inputs();
  std::shared_ptr<Storage> slot(const Buffer& b) const;  // a buffer's bytes in the arena
  // Before every run (plain, replay, profile, check): reserves the step's counters on the host
  // generator and writes them into the {seed, base} pair unless it holds them already (the
  // plan's philox_advance_ moved it there in the last run); step_done() notes that move.
  void sync_rng();
  void step_done();
  void bind();  // onto arena_ (allocated when unset)
  void bind_instruction(Instruction& ins);
  void bind_runs();  // fusion.cpp
  void execute_run(FusedRun& run);
  void unfuse(FusedRun& run, const std::string& why);
  void run_code(std::vector<Instruction>& code, const std::function<void(int)>* progress);
  void poison(const std::vector<int>& released);
  void bind_branch(Branch& b);  // branch.cpp
  void run_branch(Instruction& ins);
  void run_block(Branch& b, size_t index);

  Device device_;
  std::vector<Buffer> buffers_;
  std::vector<Instruction> code_;
  std::vector<FusedRun> runs_;
  std::vector<std::shared_ptr<Branch>> branches_;  // by region id; null for a region a pass removed
  std::vector<Value> inputs_, outputs_;
  Tensors input_t_, output_t_;
  // CPU plans read an input in the caller's memory, without copying it into the arena, when only
  // plain top-level instructions read it and none writes it: each run, their launches are
  // re-prepared if the caller's bytes moved. Per input; found by bind().
  struct InPlaceInput {
    std::string copied_because;         // why it cannot be (empty when it can)
    std::vector<int> readers;           // top-level instructions that read it
    std::shared_ptr<Storage> owner{};   // the caller's storage it is read from now (null: its arena slot)
    const void* at = nullptr;           // and where in it
  };
  std::vector<InPlaceInput> in_place_;
  std::shared_ptr<Storage> arena_;
  size_t arena_bytes_ = 0;  // what the memory plan needs (a shared arena may be larger)
  // Temporaries of kernel wrappers: the first run measures the most one kernel needs, later runs
  // take them from this block (see KernelScratch), so a warm plan allocates nothing.
  KernelScratch scratch_;
  // What every launch of a run gets (execute fills it): the stream the run is queued on and the
  // scratch above.
  KernelEnv env_;
  std::shared_ptr<Storage> scratch_block_;
  int philox_ = -1;  // the {seed, base} pair's buffer (program.h), -1 when the step draws nothing
  int64_t rng_advance_ = 0;
  std::optional<RngState> philox_holds_;  // what the pair holds, as far as the host knows
  bool poison_ = false;
  RunStats run_stats_;
  std::shared_ptr<Capture> capture_;  // made in bind()
};

// Copies of tensors' values, and writing them back (the CUDA graph capture self-check runs a step
// and restores the state it touched).
Tensors snapshot(const Tensors& tensors);
void restore(const Tensors& tensors, const Tensors& copies);

}  // namespace fg::plan
