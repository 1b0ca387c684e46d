// How a switch and a while_/until loop decide. Eagerly the graph reads the selector or the halt
// value on the host. A compile tracer is a ControlFlow too: it traces every branch (or the loop's
// body and halt) as blocks of one branch instruction, so the compiled plan decides at run time
// (plan/branch_trace.cpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "flowgrad/core/context.h"  // RngState
#include "flowgrad/nn/module.h"

namespace fg::graph {

// Calls a node's module with the graph's checks (one output tensor).
using CallModule = std::function<Tensor(const std::shared_ptr<nn::Module>&, const Tensors&)>;

struct SwitchCall {
  std::string node;  // "node 3 (switch(...))" for messages
  Tensor selector;   // the selector's one-element output
  RngState rng;      // branch b draws from derive_stream(rng, kSwitchStreams + b) (ops/rng.h)
  Tensor x;
  std::vector<std::shared_ptr<nn::Module>> branches;
  CallModule call;
};

struct LoopCall {
  std::string node;
  bool until;        // halt after the body (until) or before it (while_)
  int64_t max_iter;
  RngState rng;      // iteration i's body draws from derive_stream(rng, kLoopStreams + i), its halt kHaltStreams + i
  Tensor x;
  Tensors refs;      // extra body inputs (using)
  std::shared_ptr<nn::Module> body, halt;
  CallModule call;
};

class ControlFlow {
 public:
  virtual ~ControlFlow() = default;
  virtual Tensor run_switch(const SwitchCall& c) = 0;
  virtual Tensor run_loop(const LoopCall& c) = 0;
};

// The innermost trace mode of this thread that is a ControlFlow (a compile tracer), or null: eager
// decisions. Levels run one node at a time while a trace mode is on (ops/dispatch.h: tracing()), so
// each construct is traced as a whole.
ControlFlow* control_flow();

}  // namespace fg::graph
