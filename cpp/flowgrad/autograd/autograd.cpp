#include "flowgrad/autograd/autograd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <queue>
#include <unordered_map>
#include <utility>

#include "flowgrad/ops/autocast.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"

namespace fg {
namespace {

std::atomic<uint64_t> g_sequence{0};
// The node whose backward rule is running on this thread: ops it calls are reported as its backward.
thread_local const Node* t_backward_node = nullptr;

AutogradMeta& meta(const Tensor& t) {
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

// detect_anomaly's scan, through ops on any device: x - x is 0 wherever x is finite and NaN where
// it is NaN or +-inf, so one sum says whether t holds either (one host read). The scan's own ops
// are not scanned.
void check_finite(const Tensor& t, const char* op, const char* phase, size_t index) {
  if (context().scanning || !t.defined() || !is_floating(t.dtype()) || t.storage()->is_shape_only()) return;
  bool finite;
  {
    AnomalyScan scanning(true);
    GradModeGuard no_grad(false);
    finite = std::isfinite(item(sum(t - t, {}, false)));
  }
  FG_CHECK(finite, Value, "detect_anomaly: op '", op, "' produced NaN or Inf in ", phase, " (",
           phase[0] == 'f' ? "output " : "a gradient, tensor ", index, ", ", describe(t), ")");
}

Edge edge_to(const Tensor& t) {
  if (!requires_grad(t)) return {};
  const auto& m = t.impl()->autograd;
  if (m->grad_fn) return Edge{m->grad_fn, m->output_nr, nullptr};
  return Edge{nullptr, 0, t.impl_ptr()};
}

SpecList specs_of(TensorList ts) {
  SpecList s;
  s.reserve(ts.size());
  for (const Tensor& t : ts) s.push_back({t.shape(), t.dtype()});
  return s;
}

// Gives the floating outputs of a node their autograd identity (output i of node).
void attach_outputs(const std::shared_ptr<Node>& node, const Tensors& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!is_floating(outputs[i].dtype())) continue;
    AutogradMeta& m = meta(outputs[i]);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<int>(i);
  }
}

bool differentiable_input(const OpDef& op, size_t i) { return i >= 32 || !((op.nondiff_inputs >> i) & 1u); }

// Whether record() will make a node for this call (the op's inputs as they are before it runs).
bool records(const OpDef& op, TensorList in) {
  if (!context().grad_enabled || !op.backward) return false;
  for (size_t i = 0; i < in.size(); ++i)
    if (differentiable_input(op, i) && requires_grad(in[i])) return true;
  return false;
}

void watch_version(Node& node, const Tensor& t, bool output, int index) {
  if (t.defined()) node.versions.push_back({t.storage(), t.storage()->version(), output, index});
}

// The autograd mode (ops/dispatch.h): anomaly checks, then a tape node when a differentiable input needs it. An
// in-place op's input 0 is out[0] (its autograd identity, not yet moved to this node); `in[0]`
// holds its values from before the write, or nothing (see run_op).
void record(const OpDef& op, TensorList in, Tensors& out, const Attrs& attrs) {
  if (context().anomaly)
    for (size_t i = 0; i < out.size(); ++i)
      check_finite(out[i], t_backward_node ? t_backward_node->name() : op.name, t_backward_node ? "backward" : "forward", i);
  Tensors in_place_inputs;
  if (op.in(Group::InPlace)) {
    in_place_inputs = in.vec();
    in_place_inputs[0] = out[0];
  }
  TensorList inputs = op.in(Group::InPlace) ? TensorList(in_place_inputs) : in;
  if (!records(op, inputs)) return;
  auto node = std::make_shared<Node>();
  node->op = &op;
  node->attrs = attrs;
  node->sequence = g_sequence.fetch_add(1);
  node->device = out[0].device();
  node->input_specs = specs_of(inputs);
  node->output_specs = specs_of(out);
  for (size_t i = 0; i < inputs.size(); ++i)
    node->next.push_back(differentiable_input(op, i) ? edge_to(inputs[i]) : Edge{});
  if (op.saved == Saved::Inputs || op.saved == Saved::InputsAndOutputs) node->saved_inputs = in.vec();
  if (op.saved == Saved::Outputs || op.saved == Saved::InputsAndOutputs)
    for (const Tensor& t : out) node->saved_outputs.push_back(t.alias());
  for (size_t i = 0; i < node->saved_inputs.size(); ++i) watch_version(*node, node->saved_inputs[i], false, i);
  for (size_t i = 0; i < node->saved_outputs.size(); ++i) watch_version(*node, node->saved_outputs[i], true, i);
  if (op.in(Group::View)) watch_version(*node, in[0], false, 0);  // the view reads its base's memory
  attach_outputs(node, out);
}

// The in-place check mode (before the write): PyTorch's rules for in-place ops under autograd.
Tensor prepare_in_place(const OpDef& op, TensorList in) {
  const Tensor& target = in[0];
  if (!context().grad_enabled) return Tensor();
  if (requires_grad(target)) {
    FG_CHECK(!is_leaf(target), Value, op.name, ": a leaf tensor that requires grad cannot be modified in place; "
             "wrap the update in fg.no_grad()");
    const OpDef* producer = grad_fn(target)->op;
    FG_CHECK(!(producer && producer->in(Group::View)), Value, op.name, ": cannot modify in place a view ('",
             producer->name, "') of a tensor that requires grad: the viewed tensor's gradient would miss the "
             "change; write into the base tensor (base[index] = value) or use out-of-place ops");
    FG_CHECK(op.backward, Value, op.name, ": is not differentiable (", op.not_differentiable,
             ") and cannot modify a tensor that requires grad; wrap it in fg.no_grad()");
  }
  if (!records(op, in)) return Tensor();
  if (op.saved == Saved::Inputs || op.saved == Saved::InputsAndOutputs)
    for (size_t i = 1; i < in.size(); ++i)
      FG_CHECK(in[i].storage() != target.storage(), Value, op.name, ": input ", i, " shares memory with the "
               "tensor written in place, and its gradient needs the values from before the write; use the "
               "out-of-place op");
  // A recorded copy: create_graph differentiates the rule through it back to the target's history.
  return (op.flags & kSavesOriginal) ? clone(target) : Tensor();
}

void check_versions(const Node& node) {
  for (const SavedVersion& saved : node.versions) {
    std::shared_ptr<Storage> storage = saved.storage.lock();
    if (!storage || storage->version() == saved.version) continue;
    const TensorSpec& spec = saved.output ? node.output_specs[saved.index] : node.input_specs[saved.index];
    fail(ErrorKind::Runtime, "one of the variables needed for gradient computation has been modified by an "
         "inplace operation: ", node.name(), saved.output ? " output " : " input ", saved.index, " of shape ",
         to_string(spec.shape), " is at version ", storage->version(), "; expected version ", saved.version,
         ". An in-place op or an optimizer step changed it between the forward pass and backward(); "
         "modify a copy (.clone()) or call backward() first");
  }
}

struct Target {  // a tensor whose gradient autograd.grad returns
  std::shared_ptr<Node> fn;
  int output_nr;
  TensorImpl* leaf;
};

Tensor add_grads(const Tensor& a, const Tensor& b) { return a.defined() ? add(a, b) : b; }

class Engine {
 public:
  Engine(bool retain_graph, bool create_graph, const std::vector<Target>* targets)
      : retain_(retain_graph), create_(create_graph), targets_(targets) {
    if (targets_) captured_.resize(targets_->size());
  }

  void run(const Tensors& roots, const Tensors& root_grads) {
    GradModeGuard mode(create_);
    for (size_t i = 0; i < roots.size(); ++i) seed(roots[i], root_grads[i], i);
    count_dependencies();
    for (auto& [node, buffer] : buffers_)
      if (deps_[node] == 0) ready_.push(node);
    while (!ready_.empty()) {
      Node* node = ready_.top();
      ready_.pop();
      execute(node);
    }
  }

  Tensors captured() const { return captured_; }

 private:
  struct Later {
    bool operator()(const Node* a, const Node* b) const { return a->sequence < b->sequence; }
  };

  void seed(const Tensor& root, const Tensor& grad, size_t index) {
    FG_CHECK(requires_grad(root), Value, "backward: element ", index,
             " of the outputs does not require grad and has no grad_fn");
    Edge e = edge_to(root);
    deliver(e, grad);
    if (e.leaf) leaf_reached(e.leaf.get());
  }

  void count_dependencies() {
    std::vector<Node*> stack;
    for (auto& [node, buffer] : buffers_) stack.push_back(node);
    std::unordered_map<Node*, bool> seen;
    for (Node* n : stack) seen[n] = true;
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      owned_.push_back(n->shared_from_this());
      for (const Edge& e : n->next) {
        if (e.leaf) ++leaf_deps_[e.leaf.get()];
        if (!e.fn) continue;
        ++deps_[e.fn.get()];
        if (!seen[e.fn.get()]) {
          seen[e.fn.get()] = true;
          stack.push_back(e.fn.get());
        }
      }
    }
  }

  void deliver(const Edge& e, const Tensor& grad) {
    if (!grad.defined() || !e.defined()) return;
    if (e.leaf && targets_ && std::none_of(targets_->begin(), targets_->end(),
                                           [&](const Target& t) { return t.leaf == e.leaf.get(); }))
      return;  // autograd.grad: a leaf it does not return neither accumulates nor runs its hooks
    if (e.leaf && e.leaf->autograd && !e.leaf->autograd->grad_hooks.empty()) {  // hooks see the pass's sum
      auto& [leaf, sum] = hooked_[e.leaf.get()];
      leaf = e.leaf;
      sum = add_grads(sum, grad);
      return;
    }
    if (e.leaf) {
      accumulate_leaf(e.leaf, grad);
      return;
    }
    Tensors& buffer = buffers_[e.fn.get()];
    if (buffer.empty()) {
      buffer.resize(e.fn->output_specs.size());
      owned_.push_back(e.fn);
    }
    buffer[e.output_nr] = add_grads(buffer[e.output_nr], grad);
  }

  void accumulate_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& grad) {
    if (targets_) {
      for (size_t i = 0; i < targets_->size(); ++i)
        if ((*targets_)[i].leaf == leaf.get()) captured_[i] = add_grads(captured_[i], grad);
      return;
    }
    AutogradMeta& m = *leaf->autograd;
    Tensor previous;  // released after the lock: freeing NumPy-owned memory takes the GIL
    std::lock_guard<std::mutex> lock(m.grad_mutex);
    previous = m.grad;
    m.grad = accumulated(m.grad, grad, leaf->dtype);
  }

  Tensor accumulated(const Tensor& sum, const Tensor& grad, DType dtype) {
    if (create_) return add_grads(sum, grad.dtype() == dtype ? grad : cast(grad, dtype));
    if (sum.defined() || grad.dtype() != dtype)  // a fresh tensor either way
      return detach(add_grads(sum, grad.dtype() == dtype ? grad : cast(grad, dtype)));
    // The first gradient is kept as is only when nothing else refers to its memory (an add's
    // backward hands one tensor to both inputs): .grad tensors never alias each other.
    bool unique = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1;
    return unique ? detach(grad) : raw::clone(grad);
  }

  void execute(Node* node) {
    FG_CHECK(!node->released, Runtime, "backward: trying to backward through the graph of '",
             node->name(), "' a second time (its saved tensors were freed); pass "
             "retain_graph=True to the first backward call");
    check_versions(*node);
    Tensors grads = std::move(buffers_[node]);
    grads.resize(node->output_specs.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const TensorSpec& s = node->output_specs[i];
      const bool delivered = grads[i].defined();
      if (!delivered && is_floating(s.dtype)) grads[i] = zeros(s.shape, s.dtype, node->device);
      if (targets_)  // autograd.grad returns a non-leaf's gradient before its hooks, as PyTorch does
        for (size_t t = 0; t < targets_->size(); ++t)
          if ((*targets_)[t].fn.get() == node && (*targets_)[t].output_nr == static_cast<int>(i))
            captured_[t] = add_grads(captured_[t], grads[i]);
      if (delivered && i < node->output_hooks.size()) grads[i] = hooked(node->output_hooks[i], std::move(grads[i]), s);
    }
    std::vector<bool> needs;
    for (const Edge& e : node->next) needs.push_back(e.defined());
    Tensors outputs;
    for (size_t i = 0; i < node->saved_outputs.size(); ++i)
      outputs.push_back(create_ ? node->attached_output(static_cast<int>(i)) : node->saved_outputs[i]);
    BackwardCtx ctx{node->attrs, node->saved_inputs, outputs, node->input_specs, grads, needs, create_};
    Tensors input_grads;
    {
      struct Running {  // t_backward_node for the rule's duration, restored on an exception too
        const Node* outer = std::exchange(t_backward_node, nullptr);
        explicit Running(const Node* n) { t_backward_node = n; }
        ~Running() { t_backward_node = outer; }
      } running(node);
      AutocastScope autocast_off({});  // gradients follow the dtypes of the forward
      input_grads = node->custom ? node->custom(grads) : node->op->backward(ctx);
    }
    FG_ASSERT(input_grads.size() == node->next.size());
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& e = node->next[i];
      Tensor g = std::move(input_grads[i]);  // sole owner unless the rule shared it
      if (g.defined() && e.defined()) {
        if (context().anomaly) check_finite(g, node->name(), "backward", i);
        const TensorSpec& s = node->input_specs[i];
        FG_CHECK(g.shape() == s.shape, Runtime, "internal error: backward of '", node->name(),
                 "' returned a gradient of shape ", to_string(g.shape()), " for input ", i,
                 " of shape ", to_string(s.shape));
        if (g.dtype() != s.dtype) g = cast(g, s.dtype);
        deliver(e, g);
      }
      passed(e);
    }
    buffers_.erase(node);
    if (!retain_) {
      node->saved_inputs.clear();
      node->saved_outputs.clear();
      node->released = node->custom || node->op->saved != Saved::Nothing;
      if (node->custom) node->custom = nullptr;
    }
  }

  // One edge of a finished node is done: its node may become ready, or (when no gradient reached
  // it at all) is skipped so that the leaves below it still learn that backward passed them.
  void passed(const Edge& first) {
    std::vector<Edge> edges{first};
    while (!edges.empty()) {
      Edge e = std::move(edges.back());
      edges.pop_back();
      if (e.leaf && --leaf_deps_[e.leaf.get()] <= 0) leaf_reached(e.leaf.get());
      if (!e.fn || --deps_[e.fn.get()] != 0) continue;
      if (buffers_.count(e.fn.get())) {
        ready_.push(e.fn.get());
      } else {
        for (const Edge& below : e.fn->next) edges.push_back(below);
      }
    }
  }

  // The tensor's hooks in order, each given the last one's result; a replacement must keep the
  // gradient's shape (its dtype becomes the tensor's).
  static Tensor hooked(const GradHooks& hooks, Tensor grad, const TensorSpec& s) {
    const GradHooks copy = hooks;  // a hook may remove itself
    for (const auto& [id, hook] : copy) {
      std::optional<Tensor> out = hook(grad);
      if (!out || !out->defined()) continue;
      FG_CHECK(out->shape() == s.shape, Shape, "register_hook: a hook returned a gradient of shape ",
               to_string(out->shape()), " for a tensor of shape ", to_string(s.shape));
      grad = out->dtype() == s.dtype ? *out : cast(*out, s.dtype);
    }
    return grad;
  }

  void leaf_reached(TensorImpl* leaf) {
    if (auto it = hooked_.find(leaf); it != hooked_.end()) {  // every contribution of the pass is in
      auto [impl, sum] = std::move(it->second);
      hooked_.erase(it);
      accumulate_leaf(impl, hooked(impl->autograd->grad_hooks, std::move(sum), {impl->shape, impl->dtype}));
    }
    if (targets_ || !leaf->autograd) return;  // autograd.grad leaves .grad alone
    auto hooks = leaf->autograd->grad_ready_hooks;  // a hook may remove itself
    for (auto& [id, hook] : hooks) hook();
  }

  bool retain_, create_;
  const std::vector<Target>* targets_;
  std::unordered_map<TensorImpl*, int> leaf_deps_;
  std::unordered_map<TensorImpl*, std::pair<std::shared_ptr<TensorImpl>, Tensor>> hooked_;  // leaves with hooks
  Tensors captured_;
  std::map<Node*, Tensors> buffers_;
  std::unordered_map<Node*, int> deps_;
  std::priority_queue<Node*, std::vector<Node*>, Later> ready_;
  std::vector<std::shared_ptr<Node>> owned_;  // keeps nodes alive while the engine runs
};

Tensors default_grads(const Tensors& roots, const Tensors& given) {
  Tensors grads = given;
  grads.resize(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    if (grads[i].defined()) {
      FG_CHECK(grads[i].shape() == roots[i].shape(), Shape, "backward: gradient ",
               to_string(grads[i].shape()), " does not match output ", to_string(roots[i].shape()));
      continue;
    }
    FG_CHECK(roots[i].numel() == 1, Value, "backward: grad can be implicitly created only for ",
             "outputs with one element; output ", i, " has shape ", to_string(roots[i].shape()),
             " (pass gradient=...)");
    grads[i] = ones(roots[i].shape(), roots[i].dtype(), roots[i].device());
  }
  return grads;
}

// What dying nodes still hold (edges, saved tensors, custom backwards, which may own further
// nodes), released one at a time by the outermost ~Node on this thread.
struct Released {
  std::vector<std::shared_ptr<Node>> nodes;
  Tensors tensors;
  std::vector<CustomBackward> customs;

  bool release_one() {  // the released object dies at the end of its branch
    if (!nodes.empty()) {
      std::shared_ptr<Node> n = std::move(nodes.back());
      nodes.pop_back();
    } else if (!tensors.empty()) {
      Tensor t = std::move(tensors.back());
      tensors.pop_back();
    } else if (!customs.empty()) {
      CustomBackward fn = std::move(customs.back());
      customs.pop_back();
    } else {
      return false;
    }
    return true;
  }
};
thread_local Released* t_releasing = nullptr;

}  // namespace

Node::~Node() {
  Released own;
  Released& to = t_releasing ? *t_releasing : own;
  for (Edge& e : next) {
    if (e.fn) to.nodes.push_back(std::move(e.fn));
    if (e.leaf) to.tensors.emplace_back(std::move(e.leaf));
  }
  for (Tensors* saved : {&saved_inputs, &saved_outputs})
    for (Tensor& t : *saved) to.tensors.push_back(std::move(t));
  if (custom) to.customs.push_back(std::move(custom));
  if (t_releasing) return;  // an outer ~Node is already releasing, from its loop
  t_releasing = &own;
  while (own.release_one()) {
  }
  t_releasing = nullptr;
}

Tensor Node::attached_output(int i) {
  Tensor t = saved_outputs[i].alias();
  AutogradMeta& m = meta(t);
  m.requires_grad = true;
  m.grad_fn = shared_from_this();
  m.output_nr = i;
  return t;
}

namespace {
struct InPlaceCheckMode final : DispatchMode {
  Tensor before_write(const OpDef& op, TensorList in) override { return prepare_in_place(op, in); }
};
struct AutogradMode final : DispatchMode {
  void after(const OpDef& op, TensorList in, Tensors& out, const Attrs& attrs) override { record(op, in, out, attrs); }
};
}  // namespace

void install_autograd() {
  static InPlaceCheckMode check;
  static AutogradMode autograd;
  install_mode(ModeKind::InPlaceCheck, &check);
  install_mode(ModeKind::Autograd, &autograd);
}

Tensors record_custom(const std::string& name, const Tensors& inputs, const Tensors& outputs,
                      CustomBackward backward) {
  Tensors result;
  for (const Tensor& t : outputs) result.push_back(t.alias());
  bool needed = false;
  for (const Tensor& t : inputs) needed |= requires_grad(t);
  if (!context().grad_enabled || !needed) return result;
  auto node = std::make_shared<Node>();
  node->custom = std::move(backward);
  node->custom_name = name;
  node->sequence = g_sequence.fetch_add(1);
  node->device = outputs.empty() ? cpu_device() : outputs[0].device();
  node->input_specs = specs_of(inputs);
  node->output_specs = specs_of(outputs);
  for (const Tensor& t : inputs) node->next.push_back(edge_to(t));
  attach_outputs(node, result);
  return result;
}

bool grad_enabled() { return context().grad_enabled; }
void set_grad_enabled(bool enabled) { context().grad_enabled = enabled; }
bool anomaly_enabled() { return context().anomaly; }
void set_anomaly_enabled(bool enabled) { context().anomaly = enabled; }

const Node* running_backward() { return t_backward_node; }

bool requires_grad(const Tensor& t) {
  const auto& m = t.impl()->autograd;
  return m && m->requires_grad;
}

void set_requires_grad(const Tensor& t, bool value) {
  FG_CHECK(is_leaf(t), Value, "requires_grad_: only leaf tensors can change requires_grad; ",
           "this tensor was produced by '", grad_fn(t)->name(), "' (use .detach())");
  FG_CHECK(!value || is_floating(t.dtype()), DType,
           "requires_grad_: only floating tensors can require gradients, got ", describe(t));
  meta(t).requires_grad = value;
}

Tensor grad_of(const Tensor& t) {
  const auto& m = t.impl()->autograd;
  if (!m) return Tensor();
  std::lock_guard<std::mutex> lock(m->grad_mutex);
  return m->grad;
}

void set_grad(const Tensor& t, const Tensor& grad) {
  if (grad.defined())
    FG_CHECK(grad.shape() == t.shape() && grad.dtype() == t.dtype(), Shape,
             "grad: assigned gradient ", describe(grad), " does not match tensor ", describe(t));
  AutogradMeta& m = meta(t);
  Tensor previous;  // released after the lock (see accumulate_leaf)
  std::lock_guard<std::mutex> lock(m.grad_mutex);
  previous = m.grad;
  m.grad = grad;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  const auto& m = t.impl()->autograd;
  return m ? m->grad_fn : nullptr;
}

bool is_leaf(const Tensor& t) { return grad_fn(t) == nullptr; }

int64_t add_grad_ready_hook(const Tensor& leaf, std::function<void()> hook) {
  FG_CHECK(is_leaf(leaf), Value, "grad-ready hooks attach to leaf tensors only; got a tensor made by '",
           grad_fn(leaf)->name(), "'");
  static std::atomic<int64_t> next_id{0};
  int64_t id = next_id++;
  meta(leaf).grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_grad_ready_hook(const Tensor& leaf, int64_t id) {
  auto& hooks = meta(leaf).grad_ready_hooks;
  std::erase_if(hooks, [id](const auto& h) { return h.first == id; });
}

int64_t add_grad_hook(const Tensor& t, GradHook hook) {
  FG_CHECK(requires_grad(t), Value, "register_hook: cannot register a hook on a tensor that does not require "
           "grad (", describe(t), ")");
  static std::atomic<int64_t> next_id{0};
  const int64_t id = next_id++;
  AutogradMeta& m = meta(t);
  if (!m.grad_fn) {
    m.grad_hooks.emplace_back(id, std::move(hook));
  } else {
    auto& hooks = m.grad_fn->output_hooks;
    if (hooks.size() <= static_cast<size_t>(m.output_nr)) hooks.resize(m.output_nr + 1);
    hooks[m.output_nr].emplace_back(id, std::move(hook));
  }
  return id;
}

void remove_grad_hook(const Tensor& t, int64_t id) {
  AutogradMeta& m = meta(t);
  auto drop = [id](GradHooks& hooks) { std::erase_if(hooks, [id](const auto& h) { return h.first == id; }); };
  drop(m.grad_hooks);
  if (m.grad_fn && static_cast<size_t>(m.output_nr) < m.grad_fn->output_hooks.size())
    drop(m.grad_fn->output_hooks[m.output_nr]);
}

Tensor detach(const Tensor& t) { return t.alias(); }

namespace {
Tensor copied_to(const Tensor& x, Device device) {
  try {
    return raw::device_copy(x, device);
  } catch (const Error& e) {
    fail(e.kind(), "to: copying from ", x.device().str(), " to ", device.str(), ": ", e.what());
  }
}
}  // namespace

Tensor to_device(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  Tensor out = copied_to(x, device);
  if (!requires_grad(x) || !grad_enabled()) return out;
  Device back = x.device();
  return record_custom("to_device", {x}, {out}, [back](const Tensors& g) { return Tensors{to_device(g[0], back)}; })[0];
}

void move_to(const Tensor& t, Device device, std::optional<DType> dtype) {
  if (!t.defined()) return;
  const DType target = dtype && is_floating(t.dtype()) ? *dtype : t.dtype();  // integer tensors keep theirs
  if (t.device() == device && t.dtype() == target) return;
  auto convert = [&](const Tensor& x) { return copied_to(raw::converted(x, target), device); };
  Tensor moved = convert(t);
  Tensor grad = grad_of(t);
  TensorImpl* impl = t.impl();
  moved.storage()->set_version(t.storage()->version());  // tensors saved for backward still match
  impl->storage = moved.storage();
  impl->offset = 0;
  impl->strides = moved.strides();
  impl->dtype = target;
  if (grad.defined()) set_grad(t, convert(grad));
}

Tensor make_parameter(const Tensor& t, bool requires_gradient) {
  Tensor p = t.alias();
  meta(p).is_parameter = true;
  if (requires_gradient) set_requires_grad(p, true);
  return p;
}

bool is_parameter(const Tensor& t) {
  const auto& m = t.impl()->autograd;
  return m && m->is_parameter;
}

void backward(const Tensors& roots, const Tensors& root_grads, bool retain_graph, bool create_graph) {
  Engine engine(retain_graph, create_graph, nullptr);
  engine.run(roots, default_grads(roots, root_grads));
}

Tensors grad(const Tensors& outputs, const Tensors& inputs, const Tensors& grad_outputs,
             bool retain_graph, bool create_graph, bool allow_unused) {
  std::vector<Target> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    FG_CHECK(requires_grad(inputs[i]), Value, "autograd.grad: input ", i, " does not require grad");
    auto fn = grad_fn(inputs[i]);
    targets.push_back(fn ? Target{fn, meta(inputs[i]).output_nr, nullptr}
                         : Target{nullptr, 0, inputs[i].impl()});
  }
  Engine engine(retain_graph, create_graph, &targets);
  engine.run(outputs, default_grads(outputs, grad_outputs));
  Tensors result = engine.captured();
  for (size_t i = 0; i < result.size(); ++i) {
    FG_CHECK(result[i].defined() || allow_unused, Value, "autograd.grad: input ", i,
             " was not used to compute the outputs (pass allow_unused=True)");
    if (result[i].defined() && !create_graph) result[i] = detach(result[i]);
  }
  return result;
}

}  // namespace fg
