// A compiled forward pass that eager autograd differentiates as one node (fg.compile(model)
// under grad). The forward and its backward are traced once, together; the trace is then cut at
// the backward's first call into two plans:
//   forward plan:  inputs -> outputs, plus the tensors the backward reads ("saved": activations,
//                  dropout masks), returned as views of its arena (no copy): a run while an
//                  earlier run's saved values live binds a fresh arena. A saved input is the
//                  caller's tensor itself, checked as eager checks it: an in-place write to it
//                  before backward raises;
//   backward plan: (one gradient per differentiable output, the saved tensors) -> the gradients
//                  of the parameters and inputs that require grad, returned as views of its own
//                  arena (no copy; they become .grad as they are): a backward while an earlier
//                  backward's gradients live (a .grad kept across steps) binds a fresh arena.
// Each run of the forward records one autograd node that holds the backward plan and that run's
// saved tensors, so backward never recomputes the forward: it costs what eager's backward costs,
// without per-op dispatch.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flowgrad/plan/plan.h"

namespace fg::plan {

// Inside an active trace: marks where the backward starts, makes one shape-only gradient per
// output that is floating and requires grad (an undefined entry for the others) and traces the
// gradients of `wrt` from them. Returns (output gradients, gradients of wrt: undefined when unused).
std::pair<Tensors, Tensors> trace_gradients(Tracer& trace, const Tensors& outputs, const Tensors& wrt);

struct AutogradSpec {
  Tensors inputs;        // the forward's inputs, as traced
  Tensors outputs;       // the forward's outputs, as traced
  Tensors grad_outputs;  // per output: its traced gradient, or undefined (not differentiable)
  Tensors grads;         // per differentiated tensor (parameters, inputs): its traced gradient, or undefined
  std::vector<std::pair<std::string, Tensor>> names;  // labels for external tensors (parameters)
  Tensors watch;         // tensors whose storage must not change (else the plans are stale)
};

class AutogradPlan {
 public:
  AutogradPlan(Tracer& trace, const AutogradSpec& spec);

  // Runs the forward plan. Under grad mode its differentiable outputs come back attached to one
  // node ("compiled", repr <CompiledBackward>) whose edges go to `wrt` (the tensors the traced gradients belong
  // to: the parameters, and the caller's inputs that require grad, in the order traced).
  Tensors run(const Tensors& inputs, const Tensors& wrt);

  std::shared_ptr<Plan> forward() const { return forward_; }
  std::shared_ptr<Plan> backward() const { return backward_; }  // null when nothing is differentiable
  int64_t saved() const { return saved_; }  // tensors the forward hands the backward
  bool up_to_date() const { return forward_->up_to_date() && (!backward_ || backward_->up_to_date()); }

 private:
  std::shared_ptr<Plan> forward_, backward_;
  size_t outputs_ = 0;
  int64_t saved_ = 0;
  std::vector<int> differentiable_;  // outputs that get a gradient
  std::vector<int> grad_of_;         // per wrt: its backward output, or -1 (unused)
  std::vector<std::pair<int, int>> saved_inputs_;  // (saved index, input index): saved as the caller's tensor
  // Held by the node of the last run with its saved values (not by the views: the backward plan
  // keeps the storage of an input it reads in place until its next run).
  std::shared_ptr<int> handoff_;
  // Held by the gradients of the last backward while they live (shared with the nodes).
  std::shared_ptr<std::shared_ptr<int>> grads_token_ = std::make_shared<std::shared_ptr<int>>();
};

}  // namespace fg::plan
