// Module: a node of a model tree holding parameters, buffers and child modules by name, in
// definition order. Built-in layers are C++ subclasses; Python subclasses override forward
// through the binding's trampoline.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "flowgrad/ops/registry.h"

namespace fg::nn {

template <class T>
using Named = std::vector<std::pair<std::string, T>>;

class Module;
// A constructor argument of a built-in module as its Python class takes it: None, bool, int,
// float, str, a list of ints, or a module.
using ConfigValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>,
                                 std::shared_ptr<Module>>;
using Config = Named<ConfigValue>;
std::string format_config(const Config& config);  // "name=value, ..." in Python syntax
// Module trees deeper than this raise InvalidArgumentError (on registration, traversal and
// nested calls) instead of overflowing the stack, like Python's recursion limit.
constexpr int kMaxModuleDepth = 1000;

class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module();  // releases children from a loop, so a deep tree does not recurse
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Inputs and outputs are tensor lists; an undefined Tensor stands for an absent (None) input.
  virtual Tensors forward(const Tensors& inputs);
  Tensors operator()(const Tensors& inputs);  // forward, counting the nesting depth

  const std::string& type_name() const { return type_name_; }
  void set_type_name(std::string name) { type_name_ = std::move(name); }

  // Registration. Re-registering a name replaces the entry in place (definition order stays).
  void register_parameter(const std::string& name, const Tensor& value);
  void register_buffer(const std::string& name, const Tensor& value);
  void register_module(const std::string& name, std::shared_ptr<Module> module);
  bool unregister(const std::string& name);
  const Tensor* parameter(const std::string& name) const;
  const Tensor* buffer(const std::string& name) const;
  std::shared_ptr<Module> child(const std::string& name) const;

  // Dotted names (blocks.0.attn.qkv.weight); a tensor shared by two modules is listed once.
  Named<Tensor> named_parameters(bool recurse = true) const;
  Named<Tensor> named_buffers(bool recurse = true) const;
  const Named<std::shared_ptr<Module>>& named_children() const { return children_; }
  Named<Module*> named_modules();  // self first, under ""

  void train(bool mode = true);
  bool training() const { return training_; }
  void zero_grad();
  // Moves every parameter and buffer to `device` and converts the floating ones to `dtype` (each
  // left as it is when not given), in place: optimizers keep holding the same tensors.
  void to(std::optional<Device> device, std::optional<DType> dtype = std::nullopt);

  Named<Tensor> state_dict() const;  // parameters then buffers, detached
  // Copies values into the existing tensors (their identity is kept for optimizers). Raises
  // InvalidArgumentError listing missing, unexpected and mis-shaped keys (strict), or only the
  // mis-shaped ones (not strict).
  void load_state_dict(const Named<Tensor>& state, bool strict = true);

  // The arguments, in the Python constructor's order, that rebuild this module's type and
  // configuration (its tensors and children are restored separately): pickling and
  // copy.deepcopy use them. None when the type cannot be rebuilt from arguments.
  virtual std::optional<Config> config() const { return std::nullopt; }
  // Own entries in registration order, names reserved with None included.
  const Named<Tensor>& own_parameters() const { return params_; }
  const Named<Tensor>& own_buffers() const { return buffers_; }

  virtual std::string extra_repr() const { return ""; }
  std::string repr() const;  // the tree with parameter counts

 protected:
  Named<Tensor> params_, buffers_;
  Named<std::shared_ptr<Module>> children_;
  bool training_ = true;
  std::string type_name_;

 private:
  // One entry of the tree below a root: the module (null for a None child), its parent's index
  // in the listing (-1 for the root) and its name there.
  struct TreeEntry {
    const Module* module;
    int parent;
    const std::string* name;
    int depth;
  };
  // The tree depth first in definition order, parents first, listed by a loop (no recursion).
  std::vector<TreeEntry> tree() const;
  static std::string dotted_name(const std::vector<TreeEntry>& tree, int i);
  // Parameter elements below each entry; a tensor held by several modules counts once.
  static std::vector<int64_t> parameter_counts(const std::vector<TreeEntry>& tree);
  Named<Tensor> collect(bool params, bool recurse) const;
};

int64_t parameter_count(const Module& m);

}  // namespace fg::nn
