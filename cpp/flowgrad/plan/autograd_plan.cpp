// A traced forward + backward cut into a forward plan and a backward plan (autograd_plan.h).
#include "flowgrad/plan/autograd_plan.h"

#include <iterator>
#include <unordered_map>
#include <unordered_set>

#include "flowgrad/autograd/autograd.h"

namespace fg::plan {
namespace {

// The tensors the backward calls read that the forward made or took as inputs, one per storage:
// the whole storage (a forward value the backward reads through a view needs all of it), or the
// input itself (a step input is contiguous from its storage's start; its storage may be larger).
Tensors saved_for_backward(const std::vector<TracedCall>& calls, size_t cut, const Tensors& inputs,
                           const Tensors& grads) {
  std::unordered_map<const Storage*, Tensor> input_of;
  for (const Tensor& x : inputs) input_of.emplace(x.storage().get(), x);
  std::unordered_set<const Storage*> made, kept;
  for (size_t i = 0; i < cut; ++i)
    for (const Tensor& t : calls[i].out) made.insert(t.storage().get());
  Tensors saved;
  auto keep = [&](const Tensor& t) {
    if (!t.defined()) return;
    const Storage* s = t.storage().get();
    if (kept.count(s)) return;
    auto input = input_of.find(s);
    if (input != input_of.end()) {
      saved.push_back(input->second);
    } else if (made.count(s) && s->is_shape_only()) {  // computed (a kernel that ran made a constant: folded)
      const size_t n = itemsize(t.dtype());
      FG_CHECK(s->bytes() % n == 0, Value, "compile: the backward reads ", fg::describe(t), " from a buffer of ",
               s->bytes(), " bytes viewed as another dtype; compiled backward plans cannot hand it over");
      saved.push_back(layout(t.storage(), {-1, 0, Dims{static_cast<int64_t>(s->bytes() / n)}, Dims{1}, t.dtype()}));
    } else {
      return;
    }
    kept.insert(s);
  };
  for (size_t i = cut; i < calls.size(); ++i)
    for (const Tensor& t : calls[i].in) keep(t);
  for (const Tensor& g : grads) keep(g);  // a gradient that is a forward value (rare: passed through)
  return saved;
}

// Which outputs a plan may return as views of its arena: those alone in an arena buffer (an
// input's or a parameter's bytes, or a buffer two outputs share, come back as copies).
std::vector<bool> arena_outputs(const Plan& plan) {
  const Executable& exec = plan.executable();
  std::unordered_map<int, int> uses;
  for (const Value& v : exec.outputs()) ++uses[v.buffer];
  std::vector<bool> viewed;
  for (const Value& v : exec.outputs())
    viewed.push_back(uses[v.buffer] == 1 && exec.buffers()[v.buffer].kind == BufferKind::Arena &&
                     !exec.buffers()[v.buffer].local);
  return viewed;
}

// t as a fresh tensor over the same bytes whose storage also holds `token` (its own TensorImpl:
// the engine makes it a .grad).
Tensor holding(const Tensor& t, const std::shared_ptr<int>& token) {
  const std::shared_ptr<Storage>& bytes = t.storage();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(bytes->data(), bytes->bytes(), bytes->device(), [bytes, token] {});
  impl->offset = t.offset();
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->dtype = t.dtype();
  return Tensor(impl);
}

Tensors defined(const Tensors& ts) {
  Tensors out;
  for (const Tensor& t : ts)
    if (t.defined()) out.push_back(t);
  return out;
}

}  // namespace

std::pair<Tensors, Tensors> trace_gradients(Tracer& trace, const Tensors& outputs, const Tensors& wrt) {
  FG_CHECK(trace.active(), Value, "trace_gradients: the trace has stopped (call it inside the tracer's block)");
  trace.backward_start = trace.calls.size();
  Tensors grad_outputs, roots, root_grads;
  for (const Tensor& y : outputs) {
    Tensor g;
    if (is_floating(y.dtype()) && requires_grad(y)) {  // an input of the backward plan: never computed here
      g = Tensor::shape_only(y.shape(), y.dtype(), y.device());
      roots.push_back(y);
      root_grads.push_back(g);
    }
    grad_outputs.push_back(g);
  }
  Tensors wanted, grads(wrt.size());
  std::vector<size_t> at;
  for (size_t i = 0; i < wrt.size(); ++i)
    if (requires_grad(wrt[i])) {
      at.push_back(i);
      wanted.push_back(wrt[i]);
    }
  if (roots.empty() || wanted.empty()) return {grad_outputs, grads};
  Tensors got = grad(roots, wanted, root_grads, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
  for (size_t k = 0; k < at.size(); ++k) grads[at[k]] = got[k];
  return {grad_outputs, grads};
}

AutogradPlan::AutogradPlan(Tracer& trace, const AutogradSpec& spec) : outputs_(spec.outputs.size()) {
  trace.stop();
  FG_CHECK(spec.grad_outputs.size() == spec.outputs.size(), Value, "AutogradPlan: ", spec.grad_outputs.size(),
           " output gradients for ", spec.outputs.size(), " outputs");
  for (const TracedCall& c : trace.calls)
    FG_CHECK(!c.branch, Value, "compile: a FlowBuilder switch or while_/until (", c.branch->label, ") in a model "
             "compiled without example inputs, under grad; compile the training step instead "
             "(fg.compile(model, loss_fn, optimizer, example_inputs=...)), which keeps branches");
  const size_t cut = std::min(trace.backward_start, trace.calls.size());
  Tensors saved = saved_for_backward(trace.calls, cut, spec.inputs, spec.grads);
  saved_ = static_cast<int64_t>(saved.size());

  // The backward's calls move to a trace of their own, which shares the forward's bookkeeping.
  Tracer back;
  back.stop();
  back.calls.assign(std::make_move_iterator(trace.calls.begin() + static_cast<std::ptrdiff_t>(cut)),
                    std::make_move_iterator(trace.calls.end()));
  trace.calls.resize(cut);
  back.first_serial = trace.first_serial;
  // The forward takes the step's counters of the generator; the backward takes none (a dropout
  // backward reads its saved mask), or each step would move the generator twice as far as eager.
  back.rng_start = back.rng_end = trace.rng_end;
  back.host_reads = trace.host_reads;
  back.origins = trace.origins;
  back.backward_start = 0;
  trace.backward_start = SIZE_MAX;

  Tensors forward_outputs = spec.outputs;
  forward_outputs.insert(forward_outputs.end(), saved.begin(), saved.end());
  forward_ = std::make_shared<Plan>(trace, PlanSpec{spec.inputs, forward_outputs, {}, spec.names, spec.watch});
  // Saved values leave as views of the forward's arena, not copies (run() hands the arena over);
  // a saved input is the caller's tensor (run() swaps it in; the plan's output is not read).
  std::unordered_map<const Storage*, int> input_at;
  for (size_t i = 0; i < spec.inputs.size(); ++i) input_at.emplace(spec.inputs[i].storage().get(), static_cast<int>(i));
  std::vector<bool> viewed(spec.outputs.size(), false);
  for (size_t k = 0; k < saved.size(); ++k) {
    auto input = input_at.find(saved[k].storage().get());
    if (input != input_at.end()) saved_inputs_.emplace_back(static_cast<int>(k), input->second);
    viewed.push_back(true);
  }
  forward_->view_outputs(std::move(viewed));

  Tensors grad_inputs = defined(spec.grad_outputs), grads = defined(spec.grads);
  if (grad_inputs.empty() || grads.empty()) return;  // nothing to differentiate: a forward plan only
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    if (spec.grad_outputs[i].defined()) differentiable_.push_back(static_cast<int>(i));
  int next = 0;
  for (const Tensor& g : spec.grads) grad_of_.push_back(g.defined() ? next++ : -1);
  grad_inputs.insert(grad_inputs.end(), saved.begin(), saved.end());
  // Its own arena: the backward reads the saved values where the forward left them.
  backward_ = std::make_shared<Plan>(back, PlanSpec{grad_inputs, grads, {}, spec.names, spec.watch});
  backward_->view_outputs(arena_outputs(*backward_));
}

Tensors AutogradPlan::run(const Tensors& inputs, const Tensors& wrt) {
  // An earlier call's saved values still live in the arena (no backward yet, retain_graph): this
  // call writes a fresh one. In a training loop backward has released them, and the arena is reused.
  if (handoff_.use_count() > 1)
    forward_->bind_arena(Storage::allocate(forward_->arena()->bytes(), forward_->device()));
  handoff_ = std::make_shared<int>(0);
  Tensors all = forward_->run(inputs);
  Tensors saved(std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(outputs_)),
                std::make_move_iterator(all.end()));
  all.resize(outputs_);
  if (!backward_ || !grad_enabled()) return all;
  // A saved input: the caller's tensor and its version now, which backward checks (as eager does).
  std::vector<std::pair<std::weak_ptr<Storage>, uint32_t>> versions;
  for (auto [k, i] : saved_inputs_) {
    saved[static_cast<size_t>(k)] = inputs[static_cast<size_t>(i)];
    versions.emplace_back(inputs[static_cast<size_t>(i)].storage(), inputs[static_cast<size_t>(i)].storage()->version());
  }
  FG_CHECK(wrt.size() == grad_of_.size(), Value, "compiled model: ", wrt.size(), " tensors to differentiate, the plan "
           "was traced with ", grad_of_.size());
  Tensors differentiable;
  for (int i : differentiable_) differentiable.push_back(all[i]);
  // The node holds the token with the saved values: once backward released them, the next run
  // may write the arena again (the backward plan may still point at their bytes; it re-points
  // at every run's inputs).
  auto backward = [plan = backward_, saved = std::move(saved), grad_of = grad_of_, token = handoff_,
                   grads_token = grads_token_, versions = std::move(versions)](const Tensors& output_grads) {
    FG_CHECK(!grad_enabled(), Value, "compiled model: backward with create_graph=True (higher-order gradients) "
             "through a model compiled by fg.compile(model); its backward plan computes first-order gradients "
             "only. Call the model uncompiled for higher-order gradients");
    (void)token;  // held, not read
    for (const auto& [weak, version] : versions) {
      std::shared_ptr<Storage> storage = weak.lock();
      FG_CHECK(!storage || storage->version() == version, Runtime, "one of the variables needed for gradient "
               "computation has been modified by an inplace operation: an input of the compiled model is at "
               "version ", storage->version(), "; expected version ", version, ". An in-place op changed it between "
               "the forward pass and backward(); modify a copy (.clone()) or call backward() first");
    }
    // The gradients are views of the backward arena: while an earlier backward's live (a .grad
    // kept across steps), this one writes a fresh arena; in a loop that drops .grad, one arena.
    if (grads_token->use_count() > 1) plan->bind_arena(Storage::allocate(plan->arena()->bytes(), plan->device()));
    *grads_token = std::make_shared<int>(0);
    Tensors in = output_grads;  // the engine sends zeros for an output that got no gradient
    in.insert(in.end(), saved.begin(), saved.end());
    Tensors got = plan->run(in);
    const std::vector<bool>& viewed = plan->executable().viewed_outputs;
    for (size_t k = 0; k < got.size(); ++k)
      if (viewed[k]) got[k] = holding(got[k], *grads_token);
    Tensors out;
    // Moved, not copied: a gradient only the engine holds becomes .grad as it is (no clone).
    for (int k : grad_of) out.push_back(k < 0 ? Tensor() : std::move(got[static_cast<size_t>(k)]));
    return out;
  };
  Tensors attached = record_custom("compiled", wrt, differentiable, std::move(backward));
  for (size_t j = 0; j < differentiable_.size(); ++j) all[static_cast<size_t>(differentiable_[j])] = attached[j];
  return all;
}

}  // namespace fg::plan
