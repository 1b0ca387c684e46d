#include "flowgrad/nn/module.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/nn/call_scope.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/ops.h"

namespace fg::nn {
namespace {

template <class T>
void put(Named<T>& entries, const std::string& name, T value) {
  for (auto& [key, existing] : entries)
    if (key == name) {
      existing = std::move(value);
      return;
    }
  entries.emplace_back(name, std::move(value));
}

template <class T>
bool drop(Named<T>& entries, const std::string& name) {
  auto it = std::find_if(entries.begin(), entries.end(), [&name = name](const auto& e) { return e.first == name; });
  if (it == entries.end()) return false;
  entries.erase(it);
  return true;
}

void check_name(const std::string& name, const char* what) {
  FG_CHECK(!name.empty() && name.find('.') == std::string::npos, Value, "register_", what,
           ": name '", name, "' must be non-empty and contain no '.'");
}

thread_local int t_call_depth = 0;  // nested Module calls on this thread
thread_local std::vector<std::shared_ptr<Module>>* t_releasing = nullptr;

}  // namespace

Module::~Module() {
  // The children of every module dying on this thread are released from the outermost
  // destructor's loop: a 100 000-deep Sequential does not recurse 100 000 destructors deep.
  std::vector<std::shared_ptr<Module>> own;
  std::vector<std::shared_ptr<Module>>& to = t_releasing ? *t_releasing : own;
  for (auto& [name, m] : children_)
    if (m) to.push_back(std::move(m));
  if (t_releasing) return;
  t_releasing = &own;
  while (!own.empty()) {
    std::shared_ptr<Module> m = std::move(own.back());
    own.pop_back();
  }  // m dies here; its own children join `own`
  t_releasing = nullptr;
}

Tensors Module::forward(const Tensors&) {
  fail(ErrorKind::Runtime, type_name_, ": this module has no forward; subclasses of fg.nn.Module ",
       "define forward(self, ...)");
}

Tensors Module::operator()(const Tensors& inputs) {
  FG_CHECK(t_call_depth < kMaxModuleDepth, Value, type_name_, ": modules call each other more than ",
           kMaxModuleDepth, " levels deep");
  struct Nested {
    Nested() { ++t_call_depth; }
    ~Nested() { --t_call_depth; }
  } nested;
  CallScope scope(*this);
  return forward(inputs);
}

CallObserver* call_observer() { return innermost_trace_as<CallObserver>(); }

std::vector<Module::TreeEntry> Module::tree() const {
  std::vector<TreeEntry> out, stack{{this, -1, nullptr, 0}};
  while (!stack.empty()) {
    TreeEntry e = stack.back();
    stack.pop_back();
    FG_CHECK(e.depth < kMaxModuleDepth, Value, type_name_, ": submodules nest more than ", kMaxModuleDepth,
             " levels deep (or a module contains itself)");
    int index = static_cast<int>(out.size());
    out.push_back(e);
    if (!e.module) continue;
    const auto& children = e.module->children_;
    for (auto it = children.rbegin(); it != children.rend(); ++it)
      stack.push_back({it->second.get(), index, &it->first, e.depth + 1});
  }
  return out;
}

std::string Module::dotted_name(const std::vector<TreeEntry>& tree, int i) {
  std::vector<const std::string*> parts;
  for (; tree[i].parent >= 0; i = tree[i].parent) parts.push_back(tree[i].name);
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : ".") + **it;
  return out;
}

void Module::register_parameter(const std::string& name, const Tensor& value) {
  check_name(name, "parameter");
  FG_CHECK(!value.defined() || is_leaf(value), Value, "register_parameter: '", name,
           "' must be a leaf tensor (use .detach())");
  // A registered tensor is a parameter: isinstance(m.weight, fg.nn.Parameter), and assigning it
  // to another module ties the weights. An existing parameter keeps its requires_grad.
  Tensor p = value.defined() && !is_parameter(value)
                 ? make_parameter(value, requires_grad(value) || is_floating(value.dtype()))
                 : value;
  drop(buffers_, name);
  drop(children_, name);
  put(params_, name, p);
}

void Module::register_buffer(const std::string& name, const Tensor& value) {
  check_name(name, "buffer");
  drop(params_, name);
  drop(children_, name);
  put(buffers_, name, value);
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  // Through the new child's subtree, a shared module expanded again only when reached deeper.
  std::unordered_map<const Module*, int> deepest;
  std::vector<std::pair<const Module*, int>> stack;
  if (module) stack.emplace_back(module.get(), 1);
  while (!stack.empty()) {
    auto [m, depth] = stack.back();
    stack.pop_back();
    FG_CHECK(m != this, Value, "register_module: '", name, "' would make this ", type_name_,
             " contain itself (a module cannot contain itself)");
    FG_CHECK(depth < kMaxModuleDepth, Value, "register_module: '", name, "' would nest modules more than ",
             kMaxModuleDepth, " levels deep");
    auto [seen, fresh] = deepest.try_emplace(m, depth);
    if (!fresh && seen->second >= depth) continue;
    seen->second = depth;
    for (const auto& [child_name, child] : m->children_)
      if (child) stack.emplace_back(child.get(), depth + 1);
  }
  drop(params_, name);
  drop(buffers_, name);
  put(children_, name, std::move(module));
}

bool Module::unregister(const std::string& name) {
  return drop(params_, name) || drop(buffers_, name) || drop(children_, name);
}

const Tensor* Module::parameter(const std::string& name) const {
  for (const auto& [key, t] : params_)
    if (key == name) return &t;
  return nullptr;
}

const Tensor* Module::buffer(const std::string& name) const {
  for (const auto& [key, t] : buffers_)
    if (key == name) return &t;
  return nullptr;
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [key, m] : children_)
    if (key == name) return m;
  return nullptr;
}

Named<Tensor> Module::collect(bool params, bool recurse) const {
  Named<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  std::vector<TreeEntry> entries = recurse ? tree() : std::vector<TreeEntry>{{this, -1, nullptr, 0}};
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    if (!entries[i].module) continue;
    std::string prefix;  // built only for modules that hold tensors
    for (const auto& [name, t] : params ? entries[i].module->params_ : entries[i].module->buffers_) {
      if (!t.defined() || !seen.insert(t.impl()).second) continue;
      if (prefix.empty() && i > 0) prefix = dotted_name(entries, i) + ".";
      out.emplace_back(prefix + name, t);
    }
  }
  return out;
}

Named<Tensor> Module::named_parameters(bool recurse) const { return collect(true, recurse); }
Named<Tensor> Module::named_buffers(bool recurse) const { return collect(false, recurse); }

Named<Module*> Module::named_modules() {
  Named<Module*> out;
  std::vector<int> position;  // tree entry -> index in out
  for (const TreeEntry& e : tree()) {
    position.push_back(static_cast<int>(out.size()));
    if (!e.module) continue;
    std::string name = e.parent <= 0 ? (e.name ? *e.name : "") : out[position[e.parent]].first + "." + *e.name;
    out.emplace_back(std::move(name), const_cast<Module*>(e.module));
  }
  return out;
}

void Module::train(bool mode) {
  for (auto& [name, m] : named_modules()) m->training_ = mode;
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) set_grad(p, Tensor());
}

void Module::to(std::optional<Device> device, std::optional<DType> dtype) {
  for (auto& [name, m] : named_modules())
    for (auto* entries : {&m->params_, &m->buffers_})
      for (auto& [key, t] : *entries)
        if (t.defined()) move_to(t, device.value_or(t.device()), dtype);  // bias=False: nothing to move
}

Named<Tensor> Module::state_dict() const {
  Named<Tensor> out = named_parameters();
  for (auto& [name, t] : named_buffers()) out.emplace_back(name, t);
  for (auto& [name, t] : out) t = detach(t);
  return out;
}

void Module::load_state_dict(const Named<Tensor>& state, bool strict) {
  Named<Tensor> own = named_parameters();
  for (auto& [name, t] : named_buffers()) own.emplace_back(name, t);
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : own) {
    auto it = std::find_if(state.begin(), state.end(), [&name = name](const auto& e) { return e.first == name; });
    if (it == state.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(name + ": checkpoint " + to_string(it->second.shape()) + " vs model " +
                           to_string(t.shape()));
    }
  }
  for (const auto& [name, t] : state)
    if (std::none_of(own.begin(), own.end(), [&name = name](const auto& e) { return e.first == name; }))
      unexpected.push_back(name);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::string problems;
  if (strict && !missing.empty()) problems += "missing keys: " + join(missing) + "; ";
  if (strict && !unexpected.empty()) problems += "unexpected keys: " + join(unexpected) + "; ";
  if (!mismatched.empty()) problems += "shape mismatches: " + join(mismatched) + "; ";
  FG_CHECK(problems.empty(), Value, "load_state_dict for ", type_name_, ": ", problems);
  GradModeGuard no_grad(false);
  for (const auto& [name, t] : own) {
    auto it = std::find_if(state.begin(), state.end(), [&name = name](const auto& e) { return e.first == name; });
    if (it != state.end()) copy_(t, to_device(it->second, t.device()));
  }
}

std::string format_config(const Config& config) {
  std::ostringstream os;
  for (const auto& [name, value] : config) {
    os << (&name == &config.front().first ? "" : ", ") << name << "=";
    std::visit([&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, std::monostate>) os << "None";
      else if constexpr (std::is_same_v<V, bool>) os << (v ? "True" : "False");
      else if constexpr (std::is_same_v<V, std::string>) os << "'" << v << "'";
      else if constexpr (std::is_same_v<V, std::vector<int64_t>>) os << to_string(Dims(v));
      else if constexpr (std::is_same_v<V, std::shared_ptr<Module>>) os << (v ? v->type_name() : "None");
      else os << v;
    }, value);
  }
  return os.str();
}

int64_t parameter_count(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, p] : m.named_parameters()) n += p.numel();
  return n;
}

std::vector<int64_t> Module::parameter_counts(const std::vector<TreeEntry>& tree) {
  std::unordered_map<const TensorImpl*, std::vector<int>> holders;  // parameter -> entries holding it
  for (int i = 0; i < static_cast<int>(tree.size()); ++i)
    if (tree[i].module)
      for (const auto& [name, p] : tree[i].module->params_)
        if (p.defined()) holders[p.impl()].push_back(i);
  std::vector<int64_t> counts(tree.size(), 0);
  std::vector<const TensorImpl*> counted(tree.size(), nullptr);  // the parameter last added there
  for (const auto& [impl, entries] : holders)
    for (int i : entries)  // up to the root, or to an ancestor that already counts this one
      for (int at = i; at >= 0 && counted[at] != impl; at = tree[at].parent) {
        counted[at] = impl;
        counts[at] += impl->shape.numel();
      }
  return counts;
}

// Written from one pass over the tree: every line is written once, indented two spaces per
// level (linear in the output; re-indenting each child's text made deep trees cubic).
std::string Module::repr() const {
  std::vector<TreeEntry> entries = tree();
  std::vector<int64_t> counts = parameter_counts(entries);
  std::string out;
  auto write = [&](const std::string& text, int depth) {
    for (char c : text) {
      out += c;
      if (c == '\n') out.append(2 * static_cast<size_t>(depth), ' ');
    }
  };
  auto close = [&](int i) {  // the end of entry i, after its children
    const Module* m = entries[i].module;
    write(m ? ")" : "", entries[i].depth);
    if (m && (!m->children_.empty() || !m->params_.empty()))
      write("  # " + std::to_string(counts[i]) + " parameters", entries[i].depth);
    if (entries[i].parent >= 0) write("\n", entries[entries[i].parent].depth);
  };
  std::vector<int> open;  // entries whose children are being written
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    while (!open.empty() && open.back() != entries[i].parent) {
      close(open.back());
      open.pop_back();
    }
    const Module* m = entries[i].module;
    if (entries[i].parent >= 0) write("  (" + *entries[i].name + "): ", entries[entries[i].parent].depth);
    if (!m) {
      write("None", entries[i].depth);
      close(i);
      continue;
    }
    write(m->type_name_ + "(" + m->extra_repr(), entries[i].depth);
    if (m->children_.empty()) {
      close(i);
    } else {
      write("\n", entries[i].depth);
      open.push_back(i);
    }
  }
  while (!open.empty()) {
    close(open.back());
    open.pop_back();
  }
  return out;
}

}  // namespace fg::nn
