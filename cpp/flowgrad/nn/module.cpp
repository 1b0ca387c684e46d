#include "flowgrad/nn/module.h"

#include <algorithm>
#include <sstream>

#include "flowgrad/autograd/autograd.h"
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

std::string indent(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}

}  // namespace

Tensors Module::forward(const Tensors&) {
  fail(ErrorKind::Runtime, type_name_, ": this module has no forward; subclasses of fg.nn.Module ",
       "define forward(self, ...)");
}

void Module::register_parameter(const std::string& name, const Tensor& value) {
  check_name(name, "parameter");
  if (value.defined() && is_floating(value.dtype()) && is_leaf(value) && !requires_grad(value))
    set_requires_grad(value, true);
  FG_CHECK(!value.defined() || is_leaf(value), Value, "register_parameter: '", name,
           "' must be a leaf tensor (use .detach())");
  drop(buffers_, name);
  drop(children_, name);
  put(params_, name, value);
}

void Module::register_buffer(const std::string& name, const Tensor& value) {
  check_name(name, "buffer");
  drop(params_, name);
  drop(children_, name);
  put(buffers_, name, value);
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  FG_CHECK(module.get() != this, Value, "register_module: a module cannot contain itself");
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

void Module::collect(Named<Tensor>& out, const std::string& prefix, bool params, bool recurse,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params ? params_ : buffers_) {
    if (!t.defined() || std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, m] : children_)
    if (m) m->collect(out, prefix + name + ".", params, true, seen);
}

Named<Tensor> Module::named_parameters(bool recurse) const {
  Named<Tensor> out;
  std::vector<const TensorImpl*> seen;
  collect(out, "", true, recurse, seen);
  return out;
}

Named<Tensor> Module::named_buffers(bool recurse) const {
  Named<Tensor> out;
  std::vector<const TensorImpl*> seen;
  collect(out, "", false, recurse, seen);
  return out;
}

Named<Module*> Module::named_modules() {
  Named<Module*> out{{"", this}};
  for (size_t i = 0; i < out.size(); ++i) {  // breadth-first would reorder; expand in place
    Named<Module*> nested;
    for (const auto& [name, m] : out[i].second->children_)
      if (m) nested.emplace_back(out[i].first.empty() ? name : out[i].first + "." + name, m.get());
    out.insert(out.begin() + static_cast<long>(i) + 1, nested.begin(), nested.end());
  }
  return out;
}

void Module::train(bool mode) {
  for (auto& [name, m] : named_modules()) m->training_ = mode;
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) set_grad(p, Tensor());
}

void Module::to(Device device) {
  for (auto& [name, m] : named_modules())
    for (auto* entries : {&m->params_, &m->buffers_})
      for (auto& [key, t] : *entries) move_to_device(t, device);
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
  bool grad_mode = grad_enabled();
  set_grad_enabled(false);
  for (const auto& [name, t] : own) {
    auto it = std::find_if(state.begin(), state.end(), [&name = name](const auto& e) { return e.first == name; });
    if (it != state.end()) copy_(t, it->second);
  }
  set_grad_enabled(grad_mode);
}

int64_t parameter_count(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, p] : m.named_parameters()) n += p.numel();
  return n;
}

std::string Module::repr() const {
  std::ostringstream os;
  os << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [name, m] : children_)
      os << "  (" << name << "): " << indent(m ? m->repr() : "None") << "\n";
  }
  os << ")";
  if (!children_.empty() || !params_.empty()) os << "  # " << parameter_count(*this) << " parameters";
  return os.str();
}

}  // namespace fg::nn
