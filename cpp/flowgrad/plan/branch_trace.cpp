// Tracing data-dependent control flow: the Tracer as the graphs' ControlFlow. A switch traces
// every branch, a while_/until loop its halt and its body once, each as a block of one branch
// instruction. The construct's output gets a custom autograd node whose backward traces the
// backward of every branch (of the body, recomputed from the saved iteration input) as the
// blocks of a second branch instruction, which the plan runs as the forward decided.
//
// Shape-only values stand in for the real ones (the buffers a branch owns: outputs, carried
// values, stash, count, gradient sums): tracing runs no kernel, a plan only keeps the calls and
// the shapes.
#include <algorithm>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

Tensor stand_in(const Tensor& t) { return Tensor::shape_only(t.shape(), t.dtype(), t.device()); }

// A leaf over t's memory (the plan builder maps it to t's buffer).
Tensor leaf(const Tensor& t, bool grad) {
  Tensor d = detach(t);
  if (grad) set_requires_grad(d, true);
  return d;
}

Tensors trainable(const nn::Module& m) {
  Tensors out;
  for (auto& [name, p] : m.named_parameters())
    if (requires_grad(p)) out.push_back(p);
  return out;
}

int index_of(const Tensors& ts, const Tensor& t) {
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].impl() == t.impl()) return static_cast<int>(i);
  return -1;
}

// Traces fn() into a block of its own, closing the block on error too.
template <class Fn>
auto in_block(Tracer& tracer, std::vector<std::vector<TracedCall>>& blocks, Fn fn) {
  tracer.begin_block();
  try {
    auto result = fn();
    blocks.push_back(tracer.end_block());
    return result;
  } catch (...) {
    tracer.end_block();
    throw;
  }
}

// d(y)/d(targets) for the output gradient `grad`; undefined where y does not depend on one.
Tensors gradients(const Tensor& y, const Tensors& targets, const Tensor& grad) {
  if (targets.empty() || !requires_grad(y)) return Tensors(targets.size());
  return fg::grad({y}, targets, {grad}, false, false, true);
}

}  // namespace

Tensor Tracer::run_switch(const graph::SwitchCall& c) {
  auto fwd = std::make_shared<TracedBranch>();
  fwd->kind = BranchKind::Switch;
  fwd->label = c.node;
  fwd->selector = c.selector;
  bool x_grad = grad_enabled() && requires_grad(c.x);
  Tensors xs, ys;
  std::vector<Tensors> params;
  Tensors all;
  for (size_t b = 0; b < c.branches.size(); ++b) {
    const std::shared_ptr<nn::Module>& branch = c.branches[b];
    Tensor xb = leaf(c.x, x_grad);
    ys.push_back(in_block(*this, fwd->blocks, [&] {
      RngStream stream(derive_stream(c.rng, kSwitchStreams + b));  // as the eager switch (graph.cpp)
      return c.call(branch, {xb});
    }));
    xs.push_back(xb);
    params.push_back(trainable(*branch));
    for (const Tensor& p : params.back())
      if (index_of(all, p) < 0) all.push_back(p);
  }
  for (size_t b = 1; b < ys.size(); ++b)
    FG_CHECK(ys[b].shape() == ys[0].shape() && ys[b].dtype() == ys[0].dtype(), Graph, c.node,
             ": a compiled switch needs every branch to return the same shape and dtype; branch 0 returns ",
             describe(ys[0]), ", branch ", b, " returns ", describe(ys[b]));
  Tensor out = stand_in(ys[0]);
  for (const Tensor& y : ys) fwd->results.push_back({{y, out, false}});
  fwd->owned = {out};
  add_branch(fwd);
  Tensors inputs{c.x};
  inputs.insert(inputs.end(), all.begin(), all.end());
  return record_custom("switch", inputs, {out}, [this, fwd, xs, ys, params, all](const Tensors& g) {
           return switch_backward(fwd, xs, ys, params, all, g[0]);
         })[0];
}

Tensors Tracer::switch_backward(const std::shared_ptr<TracedBranch>& forward, const Tensors& xs, const Tensors& ys,
                                const std::vector<Tensors>& params, const Tensors& all, const Tensor& grad) {
  FG_CHECK(active_, Runtime, "compile: the backward of a traced switch ran after its trace ended");
  auto bwd = std::make_shared<TracedBranch>();
  bwd->kind = BranchKind::Switch;
  bwd->label = forward->label + " backward";
  bwd->selector = forward->selector;
  bool x_grad = requires_grad(xs[0]);
  Tensors result{x_grad ? stand_in(xs[0]) : Tensor()};
  for (const Tensor& p : all) result.push_back(stand_in(p));
  for (size_t b = 0; b < ys.size(); ++b) {
    Tensors targets;
    if (x_grad) targets.push_back(xs[b]);
    targets.insert(targets.end(), params[b].begin(), params[b].end());
    Tensors grads = in_block(*this, bwd->blocks, [&] { return gradients(ys[b], targets, grad); });
    std::vector<TracedResult> results;
    if (x_grad) results.push_back({grads[0], result[0], false});
    for (size_t i = 0; i < all.size(); ++i) {
      int k = index_of(params[b], all[i]);
      results.push_back({k < 0 ? Tensor() : grads[k + x_grad], result[i + 1], false});
    }
    bwd->results.push_back(std::move(results));
  }
  for (const Tensor& t : result)
    if (t.defined()) bwd->owned.push_back(t);
  add_branch(bwd);
  return result;
}

Tensor Tracer::run_loop(const graph::LoopCall& c) {
  auto fwd = std::make_shared<TracedBranch>();
  fwd->kind = c.until ? BranchKind::Until : BranchKind::While;
  fwd->label = c.node;
  fwd->max_iter = c.max_iter;
  fwd->init = c.x;
  fwd->carried = stand_in(c.x);
  Dims rows{c.max_iter};
  for (int64_t d : c.x.shape()) rows.push_back(d);
  fwd->stash = Tensor::shape_only(rows, c.x.dtype(), c.x.device());
  fwd->count = Tensor::shape_only(Dims{}, DType::Int64, c.x.device());
  fwd->iteration = Tensor::shape_only(Dims{}, DType::Int64, c.x.device());
  Tensor y;
  {
    GradModeGuard no_grad(false);
    Tensors body_in{detach(fwd->carried)};
    for (const Tensor& r : c.refs) body_in.push_back(detach(r));
    std::vector<std::vector<TracedCall>> halt, body;
    // Each iteration's halt and body draw from streams derived from the loop's start and the
    // iteration the plan writes before them (eager loops derive the same: graph.cpp).
    fwd->selector = in_block(*this, halt, [&] {
      RngStream stream(derive_stream(c.rng, kHaltStreams, fwd->iteration));
      return c.call(c.halt, {detach(fwd->carried)});
    });
    y = in_block(*this, body, [&] {
      RngStream stream(derive_stream(c.rng, kLoopStreams, fwd->iteration));
      return c.call(c.body, body_in);
    });
    FG_CHECK(fwd->selector.numel() == 1, Shape, c.node, ": the halt must return one value, got shape ",
             to_string(fwd->selector.shape()));
    FG_CHECK(y.shape() == c.x.shape() && y.dtype() == c.x.dtype(), Graph, c.node, ": a compiled while_/until body ",
             "must return its input's shape and dtype (", describe(c.x), "), got ", describe(y));
    using Results = std::vector<TracedResult>;
    Results carry{{y, fwd->carried, false}};
    fwd->blocks = {std::move(c.until ? body[0] : halt[0]), std::move(c.until ? halt[0] : body[0])};
    fwd->results = {c.until ? carry : Results{}, c.until ? Results{} : carry};
  }
  fwd->owned = {fwd->carried, fwd->stash, fwd->count};
  if (reads_index(fwd->iteration)) fwd->owned.push_back(fwd->iteration);
  else fwd->iteration = Tensor();
  add_branch(fwd);
  Tensors params = trainable(*c.body);
  Tensors inputs{c.x};
  inputs.insert(inputs.end(), c.refs.begin(), c.refs.end());
  inputs.insert(inputs.end(), params.begin(), params.end());
  return record_custom("loop", inputs, {fwd->carried}, [this, fwd, c, params](const Tensors& g) {
           return loop_backward(fwd, c, params, g[0]);
         })[0];
}

// One block per iteration, run for k = count - 1 .. 0: recompute the body on its saved input,
// then its backward with the carried gradient; reference and parameter gradients add up.
Tensors Tracer::loop_backward(const std::shared_ptr<TracedBranch>& forward, const graph::LoopCall& c,
                              const Tensors& params, const Tensor& grad) {
  FG_CHECK(active_, Runtime, "compile: the backward of a traced loop ran after its trace ended");
  auto bwd = std::make_shared<TracedBranch>();
  bwd->kind = BranchKind::LoopBackward;
  bwd->label = forward->label + " backward";
  bwd->loop = forward;
  bwd->init = grad;
  bwd->carried = stand_in(c.x);
  bwd->step_input = stand_in(c.x);
  bwd->iteration = Tensor::shape_only(Dims{}, DType::Int64, c.x.device());
  Tensors targets{leaf(bwd->step_input, true)}, body_in = targets;
  for (const Tensor& r : c.refs) {
    body_in.push_back(leaf(r, requires_grad(r)));
    if (requires_grad(r)) targets.push_back(body_in.back());
  }
  targets.insert(targets.end(), params.begin(), params.end());
  std::vector<std::vector<TracedCall>> blocks;
  Tensors grads = in_block(*this, blocks, [&] {
    RngStream stream(derive_stream(c.rng, kLoopStreams, bwd->iteration));  // the forward iteration's draws
    GradModeGuard on(true);
    return gradients(c.call(c.body, body_in), targets, bwd->carried);
  });
  bwd->blocks = std::move(blocks);
  // Gradients of the references, then of the parameters: undefined when never used.
  Tensors result{requires_grad(c.x) ? bwd->carried : Tensor()};
  std::vector<TracedResult> results;
  size_t k = 1;
  for (const Tensor& r : c.refs) {
    Tensor sum = requires_grad(r) && grads[k].defined() ? stand_in(r) : Tensor();
    if (requires_grad(r)) ++k;
    result.push_back(sum);
  }
  for (size_t i = 0; i < params.size(); ++i, ++k) result.push_back(grads[k].defined() ? stand_in(params[i]) : Tensor());
  k = 1;
  for (size_t i = 0; i < c.refs.size() + params.size(); ++i) {
    bool target = i >= c.refs.size() || requires_grad(c.refs[i]);
    if (result[i + 1].defined()) {
      results.push_back({grads[k], result[i + 1], true});
      bwd->zeroed.push_back(result[i + 1]);
    }
    k += target;
  }
  results.push_back({grads[0], bwd->carried, false});  // last: the reads of the carried gradient are done
  bwd->results = {std::move(results)};
  bwd->owned = {bwd->carried, bwd->step_input};
  if (reads_index(bwd->iteration)) bwd->owned.push_back(bwd->iteration);
  else bwd->iteration = Tensor();
  bwd->owned.insert(bwd->owned.end(), bwd->zeroed.begin(), bwd->zeroed.end());
  add_branch(bwd);
  return result;
}

}  // namespace fg::plan
