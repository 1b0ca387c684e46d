// The plan IR: a traced step as a value. Buffers are declarations (no memory), the body is a block
// of instructions over layouts of those buffers, and control flow and fused runs are instructions
// with blocks of their own (a fused run's block is its chain; a switch's blocks are its branches).
// No bound tensors, counters or launches live here: passes (passes/*.cpp) map a Program to a
// Program, the memory planner (memory.cpp) maps it to offsets, and lowering (build.cpp) binds the
// result to memory and kernels.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flowgrad/ops/registry.h"

namespace fg::plan {

enum class BufferKind : uint8_t {
  Input,     // a step input, copied into its arena slot at the start of every run
  External,  // memory owned outside the plan, read and written in place: parameters, optimizer
             // state, gradients bound to .grad, folded constants
  Arena,     // an intermediate: bytes at a planned offset of the arena
};

struct BufferDecl {
  BufferKind kind;
  std::string name;  // "x0", "fc.weight", "%12", "const3"
  size_t bytes = 0;
  Device device{};
  DType dtype = DType::Float32;  // of the tensor that made it (for poisoning and display)
  bool constant = false;         // folded: its values were computed once while tracing
};

// A tensor as a layout over a buffer.
struct Value {
  int buffer = -1;
  int64_t offset = 0;  // elements from the buffer's start
  Dims shape{}, strides{};
  DType dtype = DType::Float32;
};

// Which part of the step traced an instruction (explain() shows it; common-subexpression
// elimination never lets a later phase reuse a forward result, to keep recomputation).
enum class Phase : uint8_t { Forward, Backward, Update };
const char* phase_name(Phase phase);  // "forward", "backward", "optimizer"

// Call: one op. Fused: its single block is a chain of elementwise calls run tile by tile (CPU)
// or as one generated kernel (CUDA). The others are regions, one CUDA conditional node each:
//   Switch        runs blocks[selector]
//   While         blocks {halt, body}: while halt <= 0 and fewer than max_iter iterations: body
//   Until         blocks {body, halt}: body, then stop once halt > 0 (or after max_iter)
//   LoopBackward  blocks {body backward}: for k = count - 1 .. 0, on the k-th saved body input
//   Guard         blocks {update}: runs when a listed region took a listed block (optimizer
//                 updates of parameters whose gradient only a branch computes)
enum class InstrKind : uint8_t { Call, Fused, Switch, While, Until, LoopBackward, Guard };
const char* kind_name(InstrKind kind);  // "call", "fused", "switch", "while", ...
inline bool is_region(InstrKind k) { return k != InstrKind::Call && k != InstrKind::Fused; }
inline bool is_loop(InstrKind k) { return k == InstrKind::While || k == InstrKind::Until || k == InstrKind::LoopBackward; }

// A region's own state: values the executor reads or writes around its blocks.
struct Region {
  int id = -1;  // regions are numbered in the program (Guard names them)
  std::string label;
  int64_t max_iter = 0;
  Value selector{};  // Switch: the branch index; loops: the halt block's one-element result
  // Loops: the carried value starts as `init`; the forward saves each iteration's input in
  // `stash` (max_iter rows) and the iteration count in `count`.
  Value init{}, carried{}, stash{}, count{}, step_input{};
  // Loops whose blocks draw: the iteration (int64 scalar) written before each block runs, which
  // their random streams derive from (forward: n before the halt and body of iteration n;
  // LoopBackward: k before the body's recomputation for iteration k).
  Value iteration{};
  std::vector<Value> zeroed;  // LoopBackward: accumulators cleared before the first iteration
  int loop = -1;              // LoopBackward: its forward loop's region id
  std::vector<std::pair<int, int>> guard;  // Guard: runs when region .first took block .second
  std::vector<int> owned;                  // buffers the blocks' results land in
  std::vector<std::vector<int>> present;   // per owned buffer: the blocks that compute it
};

struct Instr;
using Block = std::vector<Instr>;

// Members past `op` have default initializers, so a braced `{op, attrs, in, out}` may stop early.
struct Instr {
  const OpDef* op = nullptr;  // Call only
  Attrs attrs{};
  std::vector<Value> in{}, out{};  // Call only: fused runs and regions read and write through blocks
  Phase phase = Phase::Forward;
  int origin = -1;  // index into the trace's origins
  InstrKind kind = InstrKind::Call;
  std::vector<Block> blocks{};
  Region region{};  // regions only
  int split = 0;    // Fused: tiles are ranges of the run's shape[0:split] flattened ("rows")
  int scope = -1;   // the update of one parameter it belongs to (Tracer::update_scopes), -1: none
};

// What the caller declared about a parameter's gradient: the traced value, bound (after
// bind_grads) to buffer `target`, which lowering points at the parameter's new .grad.
struct GradDecl {
  Value grad;
  Dims shape;
  DType dtype;
  std::string name;
  int target = -1;
};

struct Program {
  Device device{};
  std::vector<BufferDecl> buffers;
  Block body;
  std::vector<Value> inputs, outputs;
  std::vector<GradDecl> grads;
  int regions = 0;  // region ids issued
  // A step that draws: its random calls read buffer `philox` ("philox", External, int64 (2,): the
  // {seed, base} pair), or a pair philox_derive made from it, and draw counters past that base
  // (their offset attribute); its last instruction, philox_advance_, moves base on by
  // `rng_advance`, the counters one step takes of the generator (also without draws: a graph's
  // levels, switches and loops fork it). philox is -1 when nothing draws.
  int philox = -1;
  int64_t rng_advance = 0;

  int add_buffer(BufferDecl b) {
    buffers.push_back(std::move(b));
    return static_cast<int>(buffers.size()) - 1;
  }
  // The whole buffer as one flat value.
  Value whole(int id) const {
    const BufferDecl& b = buffers[id];
    return {id, 0, Dims{static_cast<int64_t>(b.bytes / itemsize(b.dtype))}, Dims{1}, b.dtype};
  }
};

// A region's own values that are set (selector, loop state, accumulators).
std::vector<Value*> region_values(Region& r);
std::vector<const Value*> region_values(const Region& r);

// Every instruction of `block` and, recursively, of its instructions' blocks, in program order;
// fn(instr, depth).
template <class B, class Fn>
void walk(B& block, const Fn& fn, int depth = 0) {
  for (auto& ins : block) {
    fn(ins, depth);
    for (auto& inner : ins.blocks) walk(inner, fn, depth + 1);
  }
}

// Instructions of a block and of its regions' blocks (a region counts itself too), a fused run
// counting each op of its chain (what executes one by one when it is not fused).
int64_t count_calls(const Block& block);
// The same with a fused run counting one (it launches as one kernel per tile pass).
int64_t count_kernels(const Block& block);

}  // namespace fg::plan
