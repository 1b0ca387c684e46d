// Eager autograd: per-tensor metadata, tape nodes recorded by the dispatch hook, and the
// backward engine (iterative, deterministic: nodes run in reverse creation order).
#pragma once
#include <memory>
#include <mutex>
#include <functional>
#include <optional>
#include <string>

#include "flowgrad/core/context.h"
#include "flowgrad/ops/registry.h"

namespace fg {

class Node;

// A tensor's gradient hook (Tensor.register_hook): called with the gradient backward computed for
// the tensor in one pass (a leaf's before it is accumulated into .grad, every contribution of
// the pass summed first); a result replaces that gradient, nullopt keeps it.
using GradHook = std::function<std::optional<Tensor>(const Tensor& grad)>;
using GradHooks = std::vector<std::pair<int64_t, GradHook>>;  // by the id add_grad_hook returned

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::mutex grad_mutex;  // backward() on several threads accumulates into one leaf's grad
  std::shared_ptr<Node> grad_fn;
  int output_nr = 0;
  bool is_parameter = false;  // made by fg.nn.Parameter: modules register it on assignment
  // Leaves only: called once per backward pass after the last gradient that pass sends to the
  // leaf was accumulated (or when the pass reached it without a gradient), e.g. to launch a
  // data-parallel all-reduce while the rest of backward runs. Keyed by the id add returned.
  std::vector<std::pair<int64_t, std::function<void()>>> grad_ready_hooks;
  GradHooks grad_hooks;  // leaves only; a non-leaf's live on its node (Node::output_hooks)
};

// Where a gradient flows: into output `output_nr` of a node, or into a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> fn;
  int output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;
  bool defined() const { return fn || leaf; }
};

// Backward of a node that is not a registered op (e.g. gradient checkpointing): given the
// gradients of the outputs, returns the gradients of the inputs.
using CustomBackward = std::function<Tensors(const Tensors& output_grads)>;

// The version of a buffer a node depends on (a saved tensor, or the base of a view) when the
// node was recorded; backward raises if an in-place write changed it since.
struct SavedVersion {
  std::weak_ptr<Storage> storage;
  uint32_t version = 0;
  bool output = false;  // which of the node's tensors: output or input `index`
  int index = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Releases what the node holds (edges, saved tensors) from a loop, not by recursion: a graph
  // that is a 100 000-op chain would otherwise overflow the stack when its last tensor dies.
  ~Node();

  const OpDef* op = nullptr;
  CustomBackward custom;     // set instead of op for custom nodes
  std::string custom_name;
  Attrs attrs;
  Tensors saved_inputs;
  Tensors saved_outputs;  // aliases without autograd identity (no reference cycle)
  std::vector<SavedVersion> versions;
  SpecList input_specs, output_specs;
  std::vector<Edge> next;  // one per input
  std::vector<GradHooks> output_hooks;  // per output (empty until a hook is added)
  Device device;
  uint64_t sequence = 0;
  bool released = false;

  const char* name() const { return op ? op->name : custom_name.c_str(); }
  // The saved output i, re-attached to this node so that create_graph can differentiate it.
  Tensor attached_output(int i);
};

// Makes `outputs` (computed without recording) differentiable through `backward`, with edges to
// every input that requires grad. Returns the outputs with their new autograd identity.
Tensors record_custom(const std::string& name, const Tensors& inputs, const Tensors& outputs,
                      CustomBackward backward);

// Installs the in-place check and autograd dispatch modes (called once at module import).
void install_autograd();

bool grad_enabled();
void set_grad_enabled(bool enabled);  // the Python fg.set_grad_enabled; C++ takes a GradModeGuard
// GradModeGuard (core/context.h) sets this thread's grad mode for a scope, exceptions included:
// the one way C++ code switches recording on or off.

// Anomaly mode of this thread (fg.autograd.detect_anomaly); a parallel graph level's branches take
// the caller's.
bool anomaly_enabled();
void set_anomaly_enabled(bool enabled);

// The node whose backward rule this thread is running (nullptr outside one): the compile tracer
// labels a backward op with the forward call that made the node.
const Node* running_backward();

bool requires_grad(const Tensor& t);
void set_requires_grad(const Tensor& t, bool value);  // leaves only
Tensor grad_of(const Tensor& t);
void set_grad(const Tensor& t, const Tensor& grad);
std::shared_ptr<Node> grad_fn(const Tensor& t);
bool is_leaf(const Tensor& t);
Tensor detach(const Tensor& t);
// A copy of x on another device (x itself when already there); gradients flow back across.
Tensor to_device(const Tensor& x, Device device);
// Moves a tensor's data to `device` in place and, for a floating tensor, converts it to `dtype`:
// the same tensor (its identity, autograd flags and parameter mark are kept, so optimizers still
// hold it) now lives there. Its gradient moves and converts too. Integer tensors keep their dtype.
void move_to(const Tensor& t, Device device, std::optional<DType> dtype = std::nullopt);
// Registers a grad-ready hook on a leaf (see AutogradMeta::grad_ready_hooks); returns its id.
int64_t add_grad_ready_hook(const Tensor& leaf, std::function<void()> hook);
void remove_grad_ready_hook(const Tensor& leaf, int64_t id);
// Registers a gradient hook on a tensor that requires grad (leaf or not); returns its id.
int64_t add_grad_hook(const Tensor& t, GradHook hook);
void remove_grad_hook(const Tensor& t, int64_t id);
// A leaf sharing t's data, marked as a parameter (fg.nn.Parameter).
Tensor make_parameter(const Tensor& t, bool requires_grad);
bool is_parameter(const Tensor& t);

// t.backward(gradient): accumulates into the .grad of the leaves.
void backward(const Tensors& roots, const Tensors& root_grads, bool retain_graph, bool create_graph);
// fg.autograd.grad: returns d(outputs)/d(inputs) without touching any .grad.
Tensors grad(const Tensors& outputs, const Tensors& inputs, const Tensors& grad_outputs,
             bool retain_graph, bool create_graph, bool allow_unused);

}  // namespace fg
