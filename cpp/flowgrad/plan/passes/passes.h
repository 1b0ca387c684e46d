// The passes over the plan IR, each a function Program -> Program (program.h), and the pipeline
// that runs them in order (pipeline.cpp). Passes see buffers as declarations only: none computes
// a value, allocates, or binds anything (a folded constant keeps the values the trace computed;
// lowering binds them).
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flowgrad/plan/program.h"

namespace fg::plan {

// Repeated pure calls with the same inputs (same buffer versions, layouts and attributes) reuse
// the first result, at the top level and inside blocks (a block may reuse a value made before its
// region; nothing outside a block reuses one made in it). A later phase never reuses a forward
// result that is dead by then (recomputation gradient checkpointing asked for is kept).
Program cse(Program p);
// Calls whose inputs are all constants (fills, aranges and what is computed from them only) and
// whose results nobody else writes become constant buffers holding the traced values, in every
// block (a region's results excepted: a block that did not run leaves them as they were).
Program fold_constants(Program p);
// Each declared gradient gets a target buffer: the producing call's own buffer when it writes all
// of it in the parameter's dtype (it then writes .grad directly), else a copy at the end.
Program bind_grads(Program p);
// Drops calls whose results nobody reads and that write nothing outside the plan, in every block;
// a switch or guard whose blocks end up empty goes too.
Program dce(Program p);
// A 2-D matmul whose result is only copied out transposed (the weight gradient of x @ w.t())
// computes the transposed product directly: (A B)^T = B^T A^T; in every block, when both are in it.
Program fold_transposes(Program p);
// Wraps each optimizer update whose gradient only some branch blocks compute in a Guard region,
// so that, as in eager mode (a parameter without .grad is skipped), it runs only when one ran. An
// update is one optimizer op, or the calls of one parameter's update scope (Instr::scope: a
// composed optimizer's in-place ops), guarded together.
Program guard_updates(Program p);
// A linear whose result an activation (relu, gelu, gelu_tanh, silu, tanh, sigmoid) reads whole
// becomes one linear_<act> call; the product stays an output when something else reads it.
Program fuse_epilogues(Program p);
// A residual add whose sum a layer_norm reads whole becomes one add_layer_norm call (the sum stays
// an output); a norm_backward whose dx only an add reads accumulates the add's other operand (the
// residual's gradient) and writes the add's result; in every block (fuse_add_norm.cpp).
Program fuse_add_norm(Program p);
// Two CPU matmuls side by side that do not touch each other's result (a linear's input and weight
// gradients), 2-D float32/float64, become one matmul_pair call that runs both at once; in every
// block (pair_gemms.cpp).
Program pair_gemms(Program p);
// Runs of consecutive elementwise calls writing the same shape become one Fused instruction
// whose block is the chain (fuse_elementwise.cpp says when a run is exact), in every block.
Program fuse_elementwise(Program p);
// Each all_reduce_start_ moves up to just after the instructions it needs (a bucket's last
// gradient), each all_reduce_wait_ down to just before the first instruction touching its result,
// so a data-parallel step's gradient all-reduce overlaps the rest of the backward (overlap.cpp).
Program overlap_collectives(Program p);

// Layouts against a fused run's shape (fuse_elementwise.cpp; fusion.cpp tiles by them): leading
// dims of `shape` that v has at full size and that merge into one stride, and leading dims of
// `shape` that v is broadcast over (absent or of size 1).
int spanned_dims(const Value& v, const Dims& shape);
int broadcast_dims(const Value& v, const Dims& shape);

// A pass's entry in the pipeline: its name (step.explain()'s pass counts), the function, and
// the setting that turns it off (null: always on). Unreported passes keep the count unchanged
// and are left out of the counts.
enum class PassUse : uint8_t {
  Optional,  // an optimisation: FLOWGRAD_PLAN_SKIP may name it (its name with '_' for ' ')
  Required,  // the plan is wrong without it
};
struct Pass {
  const char* name;
  Program (*run)(Program);
  PassUse use;
  bool reported;
};
const std::vector<Pass>& pipeline();
// Runs the table in order; `counts` gets (pass, instructions before, after: count_calls, the
// fusion pass counting kernels after) and `ms` the milliseconds of each reported pass. Prints
// "pass <name>: n -> m" at FLOWGRAD_DEBUG>=1.
Program run_pipeline(Program p, std::vector<std::tuple<std::string, int64_t, int64_t>>* counts,
                     std::vector<std::pair<std::string, double>>* ms = nullptr);

// Helpers of the fusion passes: one layout of one buffer; a call of op `id`; a whole buffer in
// row-major order; a buffer the step returns or binds to a gradient.
inline bool same(const Value& a, const Value& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.shape == b.shape && a.strides == b.strides &&
         a.dtype == b.dtype;
}
inline bool is_call(const Instr& ins, OpId id) { return ins.kind == InstrKind::Call && ins.op->id == id; }
inline bool dense(const Value& v) { return v.offset == 0 && v.strides == contiguous_strides(v.shape); }
inline bool is_result(const Program& p, int buffer) {
  for (const Value& v : p.outputs)
    if (v.buffer == buffer) return true;
  for (const GradDecl& g : p.grads)
    if (g.grad.buffer == buffer || g.target == buffer) return true;
  return false;
}

// Removes the instructions of `code` whose `drop` flag is set, keeping the others in order.
inline void erase_marked(Block& code, const std::vector<bool>& drop) {
  Block kept;
  for (size_t i = 0; i < code.size(); ++i)
    if (!drop[i]) kept.push_back(std::move(code[i]));
  code = std::move(kept);
}

// A pair fusion over `code` and its blocks: at each call i (its blocks first), `absorb(code, i)`
// merges one later instruction into code[i] and returns its index, or -1; the merged ones go.
template <class Absorb>
void absorb_pairs(Block& code, const Absorb& absorb) {
  std::vector<bool> drop(code.size(), false);
  for (size_t i = 0; i < code.size(); ++i) {
    for (Block& inner : code[i].blocks) absorb_pairs(inner, absorb);
    if (drop[i] || code[i].kind != InstrKind::Call) continue;
    if (int j = absorb(code, i); j >= 0) drop[j] = true;
  }
  erase_marked(code, drop);
}

}  // namespace fg::plan
