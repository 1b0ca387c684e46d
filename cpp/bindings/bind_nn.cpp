// fg.nn: Module (subclassable from Python through a smart_holder trampoline), layers, init.
#include <pybind11/functional.h>

#include "common.h"
#include "flowgrad/nn/call_scope.h"
#include "flowgrad/nn/init.h"
#include "flowgrad/nn/layers.h"

namespace fg::py_bind {

using nn::Module;

namespace {

// A module argument of a container; None and other objects are TypeErrors.
std::shared_ptr<Module> container_child(const py::handle& h, const char* container, size_t i) {
  if (!py::isinstance<Module>(h))
    throw py::type_error(std::string(container) + ": argument " + std::to_string(i) + " must be a Module, got " +
                         Py_TYPE(h.ptr())->tp_name);
  return h.cast<std::shared_ptr<Module>>();
}

py::tuple as_args(const Tensors& ts) {
  py::tuple args(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) args[i] = ts[i].defined() ? py::cast(ts[i]) : py::none();
  return args;
}

}  // namespace

// Python call arguments as the tensor list C++ forwards take: tuples are flattened, None stays.
Tensors tensors_of(const py::handle& obj, const char* what) {
  Tensors out;
  auto add = [&](const py::handle& h) {
    if (h.is_none()) out.emplace_back();
    else if (py::isinstance<Tensor>(h)) out.push_back(h.cast<Tensor>());
    else if (py::isinstance<py::tuple>(h) || py::isinstance<py::list>(h))
      for (py::handle x : h) out.push_back(x.is_none() ? Tensor() : as_tensor(x));
    else out.push_back(as_tensor(h));
  };
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    for (py::handle h : obj) add(h);
  } else {
    add(obj);
  }
  FG_CHECK(!out.empty() || py::len(obj) == 0, Value, what, ": expected tensors");
  return out;
}

py::object result_of(const Tensors& out) {
  if (out.size() == 1) return out[0].defined() ? py::cast(out[0]) : py::none();
  return as_args(out);
}

namespace {

class PyModule : public Module, public py::trampoline_self_life_support {
 public:
  using Module::Module;
  Tensors forward(const Tensors& in) override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(static_cast<const Module*>(this), "forward");
    if (!override) return Module::forward(in);
    return tensors_of(override(*as_args(in)), "forward");
  }
  std::string extra_repr() const override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(static_cast<const Module*>(this), "extra_repr");
    return override ? override().cast<std::string>() : Module::extra_repr();
  }
};

}  // namespace

bool is_python_module(const Module& m) { return dynamic_cast<const PyModule*>(&m) != nullptr; }

// Python subclasses are named by their class; C++ modules keep their own names.
void sync_type_names(Module& root) {
  for (auto& [name, m] : root.named_modules()) {
    py::object obj = py::cast(m, py::return_value_policy::reference);
    std::string cls = py::str(py::type::of(obj).attr("__name__"));
    if (dynamic_cast<PyModule*>(m)) m->set_type_name(cls);
  }
}

namespace {

py::list names_and(const nn::Named<Tensor>& entries, bool with_names) {
  py::list out;
  for (const auto& [name, t] : entries)
    out.append(with_names ? py::object(py::make_tuple(name, t)) : py::cast(t));
  return out;
}

// False while a Python subclass's __init__ has not called Module.__init__ yet.
bool initialized(const py::handle& self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  return inst->get_value_and_holder().holder_constructed();
}

void module_setattr(py::object self, const std::string& name, py::object value) {
  if (!initialized(self)) {
    const char* what = py::isinstance<Module>(value) ? "module" : py::isinstance<Tensor>(value) ? "tensor" : nullptr;
    if (what) throw py::attribute_error("cannot assign " + std::string(what) + " '" + name + "' before Module.__init__() "
                                        "call: call super().__init__() first in " +
                                        py::str(py::type::of(self).attr("__name__")).cast<std::string>() + ".__init__");
    if (PyObject_GenericSetAttr(self.ptr(), py::str(name).ptr(), value.ptr()) != 0) throw py::error_already_set();
    return;
  }
  Module& m = self.cast<Module&>();
  if (py::isinstance<Tensor>(value) && is_parameter(value.cast<Tensor>())) {
    m.register_parameter(name, value.cast<Tensor>());
  } else if (py::isinstance<Module>(value)) {
    m.register_module(name, value.cast<std::shared_ptr<Module>>());
  } else if (m.parameter(name) && py::isinstance<Tensor>(value)) {
    fail(ErrorKind::Value, "cannot assign a plain tensor to parameter '", name,
         "' (use fg.nn.Parameter(t), or None to remove it)");
  } else if (m.buffer(name) && (py::isinstance<Tensor>(value) || value.is_none())) {
    m.register_buffer(name, value.is_none() ? Tensor() : value.cast<Tensor>());
  } else {
    if (m.parameter(name) || m.child(name)) m.unregister(name);
    py::str key(name);
    if (PyObject_GenericSetAttr(self.ptr(), key.ptr(), value.ptr()) != 0) throw py::error_already_set();
  }
}

py::object module_getattr(py::object self, const std::string& name) {
  if (!initialized(self))
    throw py::attribute_error("'" + py::str(py::type::of(self).attr("__name__")).cast<std::string>() +
                              "' object has no attribute '" + name + "' (Module.__init__() was not called yet)");
  Module& m = self.cast<Module&>();
  if (const Tensor* p = m.parameter(name)) return p->defined() ? py::cast(*p) : py::none();
  if (const Tensor* b = m.buffer(name)) return b->defined() ? py::cast(*b) : py::none();
  if (auto child = m.child(name)) return py::cast(child);
  throw py::attribute_error("'" + std::string(py::str(py::type::of(self).attr("__name__"))) +
                            "' object has no attribute '" + name + "'");
}

template <class Container>
void bind_container(py::class_<Container, Module, py::smart_holder>& cls) {
  cls.def("append", [](Container& c, const py::object& m) {
    c.append(container_child(m, c.type_name().c_str(), c.named_children().size()));
  }, py::arg("module"), "Adds a module at the end.")
      .def("__len__", [](const Container& c) { return c.named_children().size(); })
      .def("__getitem__", [](const Container& c, int64_t i) {
        int64_t n = static_cast<int64_t>(c.named_children().size());
        FG_CHECK(i >= -n && i < n, Index, c.type_name(), ": index ", i, " is out of range for ", n, " modules");
        return c.named_children()[i < 0 ? i + n : i].second;
      })
      .def("__iter__", [](const Container& c) {
        py::list items;
        for (const auto& [name, m] : c.named_children()) items.append(py::cast(m));
        return py::iter(items);
      });
}

using Fn = std::function<Tensor(const Tensor&)>;

// A stateless layer class: `make(args...)` returns its function, or (function, its arguments).
template <class Layer, class R, class... Args, class... Extra>
void bind_stateless_with(py::module_& m, const char* name, const char* doc, std::function<R(Args...)> make,
                         const Extra&... extra) {
  py::class_<Layer, nn::Function, py::smart_holder>(m, name, doc)
      .def(py::init([name, make](Args... args) {
        R made = make(args...);
        if constexpr (std::is_same_v<R, Fn>) return std::make_shared<Layer>(name, made);
        else return std::make_shared<Layer>(name, made.first, made.second);
      }), extra...);
}
template <class Layer, class Make, class... Extra>
void bind_stateless(py::module_& m, const char* name, const char* doc, Make make, const Extra&... extra) {
  bind_stateless_with<Layer>(m, name, doc, std::function(make), extra...);
}

}  // namespace

void bind_nn(py::module_& m) {
  py::class_<Module, PyModule, py::smart_holder> mod(m, "Module", py::dynamic_attr(),
      "Base class of layers and models. Subclass it in Python: assign parameters "
      "(fg.nn.Parameter), buffers and submodules as attributes and define forward.");
  mod.def(py::init<>())
      .def("forward", [](Module& self, py::args args) {
        Tensors in = tensors_of(args, "forward"), out;
        {
          py::gil_scoped_release release;  // Python submodules take it back in the trampoline
          out = self.forward(in);
        }
        return result_of(out);
      }, "The computation; subclasses override it.")
      .def("__call__", [](py::object self, py::args args, py::kwargs kwargs) {
        nn::CallScope scope(self.cast<Module&>());
        return self.attr("forward")(*args, **kwargs);
      }, "Runs forward.")
      .def("__setattr__", &module_setattr)
      .def("__getattr__", &module_getattr)
      .def("__delattr__", [](py::object self, const std::string& name) {
        Module& m = self.cast<Module&>();
        if (!m.unregister(name) && PyObject_GenericSetAttr(self.ptr(), py::str(name).ptr(), nullptr) != 0)
          throw py::error_already_set();
      })
      .def("register_parameter", [](Module& self, const std::string& name, std::optional<Tensor> t) {
        self.register_parameter(name, t ? make_parameter(*t, requires_grad(*t) || is_floating(t->dtype())) : Tensor());
      }, py::arg("name"), py::arg("tensor"), "Registers a parameter under name (None reserves the name).")
      .def("register_buffer", [](Module& self, const std::string& name, std::optional<Tensor> t) {
        self.register_buffer(name, t.value_or(Tensor()));
      }, py::arg("name"), py::arg("tensor"), "Registers a non-trainable tensor saved in state_dict.")
      .def("register_module", &Module::register_module, py::arg("name"), py::arg("module"),
           "Registers a child module under name.")
      .def("parameters", [](const Module& self, bool recurse) { return names_and(self.named_parameters(recurse), false); },
           py::arg("recurse") = true, "The parameters, in definition order (shared ones once).")
      .def("named_parameters", [](const Module& self, bool recurse) { return names_and(self.named_parameters(recurse), true); },
           py::arg("recurse") = true, "(dotted name, parameter) pairs in definition order.")
      .def("buffers", [](const Module& self, bool recurse) { return names_and(self.named_buffers(recurse), false); },
           py::arg("recurse") = true, "The buffers, in definition order.")
      .def("named_buffers", [](const Module& self, bool recurse) { return names_and(self.named_buffers(recurse), true); },
           py::arg("recurse") = true, "(dotted name, buffer) pairs.")
      .def("children", [](const Module& self) {
        py::list out;
        for (const auto& [name, c] : self.named_children()) out.append(py::cast(c));
        return out;
      }, "The direct submodules.")
      .def("named_children", [](const Module& self) {
        py::list out;
        for (const auto& [name, c] : self.named_children()) out.append(py::make_tuple(name, c));
        return out;
      }, "(name, submodule) pairs of the direct submodules.")
      .def("modules", [](Module& self) {
        py::list out;
        for (auto& [name, c] : self.named_modules()) out.append(py::cast(c, py::return_value_policy::reference));
        return out;
      }, "This module and every submodule, depth first.")
      .def("named_modules", [](Module& self) {
        py::list out;
        for (auto& [name, c] : self.named_modules())
          out.append(py::make_tuple(name, py::cast(c, py::return_value_policy::reference)));
        return out;
      }, "(dotted name, module) pairs, this module first under ''.")
      .def("apply", [](py::object self, const py::object& fn) {
        for (const auto& [name, c] : self.cast<Module&>().named_children()) py::cast(c).attr("apply")(fn);
        fn(self);
        return self;
      }, py::arg("fn"), "Calls fn(module) on every submodule, children before their parent, then on this "
         "module (weight initialisation: model.apply(init)); returns self.")
      .def("requires_grad_", [](py::object self, bool requires_grad) {
        for (const auto& [name, p] : self.cast<Module&>().named_parameters(true)) set_requires_grad(p, requires_grad);
        return self;
      }, py::arg("requires_grad") = true, "Sets requires_grad on every parameter (False freezes the module); "
         "returns self.")
      .def("train", [](py::object self, bool mode) { self.cast<Module&>().train(mode); return self; },
           py::arg("mode") = true, "Sets training mode on the whole tree; returns self.")
      .def("eval", [](py::object self) { self.cast<Module&>().train(false); return self; },
           "Sets evaluation mode (dropout off); returns self.")
      .def_property_readonly("training", &Module::training, "True in training mode.")
      .def("to", named("to", [](py::object self, const py::object& target, const py::object& device,
                                const py::object& dtype) {
        std::optional<Device> dev = device.is_none() ? std::nullopt : std::optional(device_arg(device));
        std::optional<DType> dt = dtype_arg(dtype);
        if (py::isinstance<DType>(target)) dt = target.cast<DType>();  // m.to(fg.float64)
        else if (!target.is_none()) dev = device_arg(target);          // m.to("cuda")
        self.cast<Module&>().to(dev, dt);
        return self;
      }), py::arg("target") = py::none(), py::arg("device") = py::none(), py::arg("dtype") = py::none(),
         "Moves parameters and buffers to a device and/or converts the floating ones to a dtype, in place "
         "(optimizers keep their tensors); m.to('cuda'), m.to(fg.float64), m.to(device=..., dtype=...). Returns self.")
      .def("cpu", [](py::object self) { self.cast<Module&>().to(cpu_device()); return self; },
           "Moves parameters and buffers to the CPU; returns self.")
      .def("cuda", [](py::object self, const py::object& device) {
        self.cast<Module&>().to(device_arg(device.is_none() ? py::str("cuda") : device));
        return self;
      }, py::arg("device") = py::none(), "Moves parameters and buffers to a CUDA device (default: the current one); returns self.")
      .def("zero_grad", &Module::zero_grad, "Sets every parameter's .grad to None.")
      .def("state_dict", [](const Module& self) {
        py::dict out;
        for (const auto& [name, t] : self.state_dict()) out[py::str(name)] = t;
        return out;
      }, "Parameters and buffers by dotted name (detached, sharing memory).")
      .def("load_state_dict", named("load_state_dict", [](Module& self, const py::dict& sd, bool strict) {
        nn::Named<Tensor> entries;
        for (auto [k, v] : sd) entries.emplace_back(py::str(k), as_tensor(v));
        self.load_state_dict(entries, strict);
      }), py::arg("state_dict"), py::arg("strict") = true,
         "Copies values into the parameters and buffers; InvalidArgumentError names missing, unexpected and mis-shaped keys.")
      .def("extra_repr", &Module::extra_repr, "Text shown inside this module's repr parentheses.")
      .def("num_parameters", [](const Module& self) { return nn::parameter_count(self); },
           "Total number of parameter elements.")
      .def("__repr__", [](Module& self) {
        sync_type_names(self);
        return self.repr();
      });
  for (auto [name, dt] : {std::pair{"float", DType::Float32}, std::pair{"double", DType::Float64},
                          std::pair{"half", DType::Float16}, std::pair{"bfloat16", DType::BFloat16}}) {
    std::string doc = std::string("Converts the floating parameters and buffers to ") + dtype_name(dt) +
                      " in place; returns self.";
    mod.def(name, [dt = dt](py::object self) { self.cast<Module&>().to(std::nullopt, dt); return self; }, doc.c_str());
  }

  auto nn = m;  // layers live beside Module in _core; flowgrad.nn re-exports them
  py::class_<nn::Linear, Module, py::smart_holder>(nn, "Linear", "y = x W^T + b.")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true)
      .def_readonly("in_features", &nn::Linear::in_features, "Size of each input's last dim.")
      .def_readonly("out_features", &nn::Linear::out_features, "Size of each output's last dim.");
  py::class_<nn::Embedding, Module, py::smart_holder>(nn, "Embedding", "Rows of a (num_embeddings, dim) table; "
      "padding_idx: that row starts at zero and receives no gradient (PyTorch's).")
      .def(py::init<int64_t, int64_t, std::optional<int64_t>>(), py::arg("num_embeddings"), py::arg("embedding_dim"),
           py::arg("padding_idx") = py::none())
      .def_readonly("num_embeddings", &nn::Embedding::num_embeddings, "Rows of the table.")
      .def_readonly("embedding_dim", &nn::Embedding::dim, "Size of each row.")
      .def_readonly("padding_idx", &nn::Embedding::padding_idx, "The padding row (>= 0), or None.");
  py::class_<nn::LayerNorm, Module, py::smart_holder>(nn, "LayerNorm", "Layer normalisation with weight and bias.")
      .def(py::init([](const py::object& shape, double eps) {
        return std::make_shared<nn::LayerNorm>(dims_arg(shape), eps, false);
      }), py::arg("normalized_shape"), py::arg("eps") = 1e-5);
  py::class_<nn::RMSNorm, nn::LayerNorm, py::smart_holder>(nn, "RMSNorm", "RMS normalisation with a weight.")
      .def(py::init([](const py::object& shape, double eps) { return std::make_shared<nn::RMSNorm>(dims_arg(shape), eps); }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-6);
  py::class_<nn::Dropout, Module, py::smart_holder>(nn, "Dropout", "Zeroes entries with probability p in training.")
      .def(py::init<double>(), py::arg("p") = 0.5)
      .def_readwrite("p", &nn::Dropout::p, "Probability of zeroing each element (in training).");
  py::class_<nn::Conv2d, Module, py::smart_holder>(nn, "Conv2d", "2-D convolution over NCHW input.")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, bool>(), py::arg("in_channels"),
           py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1, py::arg("padding") = 0,
           py::arg("bias") = true);
  py::class_<nn::Function, Module, py::smart_holder>(nn, "_Function");
  bind_stateless<nn::ReLU>(nn, "ReLU", "max(x, 0) as a module.", [] { return Fn([](const Tensor& x) { return relu(x); }); });
  bind_stateless<nn::SiLU>(nn, "SiLU", "x * sigmoid(x) as a module.", [] { return Fn([](const Tensor& x) { return silu(x); }); });
  bind_stateless<nn::Tanh>(nn, "Tanh", "tanh as a module.", [] { return Fn([](const Tensor& x) { return tanh(x); }); });
  bind_stateless<nn::Sigmoid>(nn, "Sigmoid", "sigmoid as a module.", [] { return Fn([](const Tensor& x) { return sigmoid(x); }); });
  bind_stateless<nn::Identity>(nn, "Identity", "Returns its input.", [] { return Fn([](const Tensor& x) { return x; }); });
  bind_stateless<nn::GELU>(nn, "GELU", "GELU as a module (approximate='none' or 'tanh').", [](const std::string& approximate) {
    FG_CHECK(approximate == "none" || approximate == "tanh", Value, "GELU: approximate must be 'none' or 'tanh'");
    bool t = approximate == "tanh";
    return std::pair{Fn([t](const Tensor& x) { return gelu(x, t); }), nn::Config{{"approximate", approximate}}};
  }, py::arg("approximate") = "none");
  bind_stateless<nn::Softmax>(nn, "Softmax", "softmax along dim as a module.", [](int64_t dim) {
    return std::pair{Fn([dim](const Tensor& x) { return softmax(x, dim); }), nn::Config{{"dim", dim}}};
  }, py::arg("dim") = -1);
  bind_stateless<nn::Flatten>(nn, "Flatten", "Flattens dims start_dim..end_dim.", [](int64_t start, int64_t end) {
    return std::pair{Fn([start, end](const Tensor& x) { return flatten(x, start, end); }),
                     nn::Config{{"start_dim", start}, {"end_dim", end}}};
  }, py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  bind_stateless<nn::MaxPool2d>(nn, "MaxPool2d", "2-D max pooling.", [](int64_t k, std::optional<int64_t> stride) {
    int64_t s = stride.value_or(k);
    return std::pair{Fn([k, s](const Tensor& x) { return max_pool2d(x, k, s); }),
                     nn::Config{{"kernel_size", k}, {"stride", s}}};
  }, py::arg("kernel_size"), py::arg("stride") = py::none());
  bind_stateless<nn::AvgPool2d>(nn, "AvgPool2d", "2-D average pooling.", [](int64_t k, std::optional<int64_t> stride) {
    int64_t s = stride.value_or(k);
    return std::pair{Fn([k, s](const Tensor& x) { return avg_pool2d(x, k, s); }),
                     nn::Config{{"kernel_size", k}, {"stride", s}}};
  }, py::arg("kernel_size"), py::arg("stride") = py::none());
  py::class_<nn::Sequential, Module, py::smart_holder> seq(nn, "Sequential", "Runs modules in order.");
  seq.def(py::init([](py::args modules) {
    auto s = std::make_shared<nn::Sequential>();
    for (py::handle h : modules) s->append(container_child(h, "Sequential", s->named_children().size()));
    return s;
  }));
  bind_container(seq);
  py::class_<nn::ModuleList, Module, py::smart_holder> list(nn, "ModuleList", "A list of registered modules.");
  list.def(py::init([](const py::object& modules) {
    auto l = std::make_shared<nn::ModuleList>();
    if (!modules.is_none())
      for (py::handle h : modules) l->append(container_child(h, "ModuleList", l->named_children().size()));
    return l;
  }), py::arg("modules") = py::none());
  bind_container(list);
  py::class_<nn::MultiheadAttention, Module, py::smart_holder>(nn, "MultiheadAttention",
      "Multi-head attention: m(x) for self-attention, m(q, k, v) otherwise; an attention mask may follow.\n\n"
      "Self-attention without attention dropout runs on the CPU as one fused op on the packed qkv "
      "projection (q, k, v read in place, their gradient written into one buffer).")
      .def(py::init<int64_t, int64_t, bool, double>(), py::arg("dim"), py::arg("heads"),
           py::arg("causal") = false, py::arg("dropout") = 0.0);
  py::class_<nn::TransformerBlock, Module, py::smart_holder>(nn, "TransformerBlock",
      "Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).")
      .def(py::init<int64_t, int64_t, int64_t, bool>(), py::arg("dim"), py::arg("heads"),
           py::arg("mlp_ratio") = 4, py::arg("causal") = true);
  py::class_<nn::GRUCell, Module, py::smart_holder>(nn, "GRUCell", "One GRU step: m(x, h=None) -> h'.")
      .def(py::init<int64_t, int64_t>(), py::arg("input_size"), py::arg("hidden_size"));
  py::class_<nn::LSTMCell, Module, py::smart_holder>(nn, "LSTMCell", "One LSTM step: m(x, (h, c)=None) -> (h', c').")
      .def(py::init<int64_t, int64_t>(), py::arg("input_size"), py::arg("hidden_size"));
  py::class_<nn::Checkpoint, Module, py::smart_holder>(nn, "Checkpoint",
      "Gradient checkpointing: same outputs and gradients; intermediates recomputed in backward.")
      .def(py::init<std::shared_ptr<Module>>(), py::arg("module"));
  bind_layers(nn);

  m.def("_parameter", [](const Tensor& t, bool requires_gradient) { return make_parameter(t, requires_gradient); },
        py::arg("data"), py::arg("requires_grad") = true, "A parameter sharing t's data.");
  m.def("_is_parameter", [](const Tensor& t) { return is_parameter(t); }, "Whether t was made by fg.nn.Parameter.");

  auto init = m.def_submodule("init", "In-place initialisers (fg.nn.init).");
  init.def("uniform_", [](const Tensor& t, double a, double b) { nn::init::uniform_(t, a, b); return t; },
           py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0, "Fills with U(a, b).");
  init.def("normal_", [](const Tensor& t, double mean, double std) { nn::init::normal_(t, mean, std); return t; },
           py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0, "Fills with N(mean, std^2).");
  init.def("zeros_", [](const Tensor& t) { nn::init::constant_(t, 0); return t; }, py::arg("tensor"), "Fills with 0.");
  init.def("ones_", [](const Tensor& t) { nn::init::constant_(t, 1); return t; }, py::arg("tensor"), "Fills with 1.");
  init.def("constant_", [](const Tensor& t, double v) { nn::init::constant_(t, v); return t; },
           py::arg("tensor"), py::arg("val"), "Fills with a value.");
  init.def("calculate_gain", &nn::init::gain, py::arg("nonlinearity"), py::arg("param") = 0.01,
           "The recommended gain for a nonlinearity.");
  init.def("xavier_uniform_", [](const Tensor& t, double g) { nn::init::xavier_uniform_(t, g); return t; },
           py::arg("tensor"), py::arg("gain") = 1.0, "Glorot uniform.");
  init.def("xavier_normal_", [](const Tensor& t, double g) { nn::init::xavier_normal_(t, g); return t; },
           py::arg("tensor"), py::arg("gain") = 1.0, "Glorot normal.");
  init.def("kaiming_uniform_", [](const Tensor& t, double a, const std::string& mode, const std::string& nl) {
    nn::init::kaiming_uniform_(t, a, mode, nl);
    return t;
  }, py::arg("tensor"), py::arg("a") = 0.0, py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu",
     "He uniform.");
  init.def("kaiming_normal_", [](const Tensor& t, double a, const std::string& mode, const std::string& nl) {
    nn::init::kaiming_normal_(t, a, mode, nl);
    return t;
  }, py::arg("tensor"), py::arg("a") = 0.0, py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu",
     "He normal.");
}

}  // namespace fg::py_bind
