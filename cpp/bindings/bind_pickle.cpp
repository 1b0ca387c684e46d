// The C++ side of copying and pickling (flowgrad/_pickle.py wires the Python protocols):
// Tensor.clone, tensor contents as plain data, a module's own entries and constructor
// arguments, construction without touching the global random stream, and Graph copies.
#include <pybind11/functional.h>

#include <cstring>

#include "common.h"
#include "flowgrad/autograd/clone.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/graph/graph.h"
#include "flowgrad/ops/raw.h"

namespace fg::py_bind {

void bind_graph_pickle(py::module_& m);  // bind_graph_pickle.cpp

namespace {

using nn::Module;

// (dtype name, shape, bytes, requires_grad, is_parameter, device): all a pickled tensor keeps.
py::tuple tensor_state(const Tensor& t) {
  Tensor host = raw::contiguous(raw::device_copy(detach(t), cpu_device()));
  py::bytes data(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.numel()) * itemsize(t.dtype()));
  return py::make_tuple(dtype_name(t.dtype()), py::tuple(py::cast(t.shape().vec())), data, requires_grad(t),
                        is_parameter(t), t.device().str());
}

Tensor tensor_from_state(const std::string& dtype, const std::vector<int64_t>& shape, const py::bytes& data,
                         bool grad, bool parameter, const std::string& device) {
  DType dt = dtype_from_name(dtype);
  Tensor host = Tensor::empty(Dims(shape), dt, cpu_device());
  std::string_view bytes = data;
  size_t expected = static_cast<size_t>(host.numel()) * itemsize(dt);
  FG_CHECK(bytes.size() == expected, Value, "unpickling a tensor: ", bytes.size(), " bytes for a ", dtype, " tensor of ",
           "shape ", to_string(host.shape()), " (expected ", expected, ")");
  if (expected) std::memcpy(host.data_ptr(), bytes.data(), expected);
  Tensor t = raw::device_copy(host, Device::parse(device));
  if (parameter) return make_parameter(t, grad);
  if (grad) set_requires_grad(t, true);
  return t;
}

py::list entries(const nn::Named<Tensor>& named) {
  py::list out;
  for (const auto& [name, t] : named) out.append(py::make_tuple(name, t.defined() ? py::cast(t) : py::none()));
  return out;
}

// (training, parameters, buffers, children): the module's own entries, None ones included.
py::tuple module_state(const Module& m) {
  py::list children;
  for (const auto& [name, c] : m.named_children()) children.append(py::make_tuple(name, c));
  return py::make_tuple(m.training(), entries(m.own_parameters()), entries(m.own_buffers()), children);
}

void set_module_state(Module& m, bool training, const py::list& params, const py::list& buffers,
                      const py::list& children) {
  m.train(training);  // before the children are replaced: each copied child keeps its own mode
  for (py::handle item : params) {
    auto [name, value] = item.cast<std::pair<std::string, std::optional<Tensor>>>();
    m.register_parameter(name, value.value_or(Tensor()));  // pickled as a parameter: a frozen one stays frozen
  }
  for (py::handle item : buffers) {
    auto [name, value] = item.cast<std::pair<std::string, std::optional<Tensor>>>();
    m.register_buffer(name, value.value_or(Tensor()));
  }
  for (py::handle item : children) {
    auto [name, child] = item.cast<std::pair<std::string, std::shared_ptr<Module>>>();
    m.register_module(name, child);
  }
}

}  // namespace

void bind_pickle(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def("clone", &clone, ReleaseGil(), "A copy with its own memory; gradients flow back to self.");
  m.def("clone", &clone, py::arg("input"), ReleaseGil(), "A copy with its own memory; gradients flow back to input.");
  m.def("_tensor_state", &tensor_state, py::arg("tensor"), "A tensor's dtype, shape, bytes and flags (pickling).");
  m.def("_tensor_from_state", &tensor_from_state, "The tensor _tensor_state described (unpickling).");
  m.def("_copy_leaf", [](const Tensor& t) { return copy_leaf(t, CopyGrad::Yes); }, py::arg("tensor"),
        "A new leaf with t's values, flags and a copy of its grad (copy.deepcopy).");
  m.def("_module_config", [](const Module& self) -> py::object {
    if (is_python_module(self) || typeid(self) == typeid(Module)) return py::list();  // entries are all it has
    auto config = self.config();
    if (!config) return py::none();
    py::list args;
    for (const auto& [name, value] : *config) args.append(py::cast(value));
    return args;
  }, py::arg("module"), "The constructor arguments that rebuild a built-in module (None: not rebuildable).");
  m.def("_module_state", &module_state, py::arg("module"), "(training, parameters, buffers, children) of a module.");
  m.def("_set_module_state", &set_module_state, "Registers pickled entries and sets the training flag.");
  m.def("_init_module", [](const py::object& base, const py::object& obj, const py::args& args) {
    RngStream discarded(rng_state());  // initial weights are replaced by the copy's: leave the caller's stream alone
    base.attr("__init__")(obj, *args);
    sync_type_names(obj.cast<Module&>());  // a Python subclass is named by its class, as when it was built
  }, "Runs base.__init__(obj, *args) drawing random initial values from a private stream.");
  m.def("_graph_clone", [](const graph::Graph& g, const std::function<std::shared_ptr<Module>(std::shared_ptr<Module>)>& copy_module,
                           const std::function<Tensor(Tensor)>& copy_tensor) {
    return g.clone_with([&](const std::shared_ptr<Module>& mod) { return copy_module(mod); },
                        [&](const Tensor& t) { return copy_tensor(t); });
  }, "The graph over copies of its node modules (copy.deepcopy).");
  bind_graph_pickle(m);
}

}  // namespace fg::py_bind
