// The Tensor class: properties, conversion, autograd surface, operators, __getitem__.
#include <sstream>

#include "common.h"
#include "flowgrad/ops/raw.h"

namespace fg::py_bind {

namespace {

IndexItem index_item(const py::handle& obj) {
  IndexItem item;  // the other members keep their defaults
  item.kind = IndexItem::Kind::Int;
  auto optional_int = [](const py::handle& h) -> std::optional<int64_t> {
    if (h.is_none()) return std::nullopt;
    return int_arg(h, "a slice bound");
  };
  if (obj.is_none()) {
    item.kind = IndexItem::Kind::NewAxis;
  } else if (obj.ptr() == Py_Ellipsis) {
    item.kind = IndexItem::Kind::Ellipsis;
  } else if (py::isinstance<py::slice>(obj)) {
    item.kind = IndexItem::Kind::Slice;
    item.start = optional_int(obj.attr("start"));
    item.stop = optional_int(obj.attr("stop"));
    item.step = optional_int(obj.attr("step"));
  } else if (py::isinstance<Tensor>(obj) || py::isinstance<py::bool_>(obj) || py::isinstance<py::array>(obj) ||
             !PyIndex_Check(obj.ptr())) {  // lists, arrays and tensors index like NumPy arrays
    item.kind = IndexItem::Kind::Tensor;
    item.tensor = as_tensor(obj);
    if (item.tensor.ndim() == 0 && is_integral(item.tensor.dtype())) {  // a 0-d int index acts as an int
      item.kind = IndexItem::Kind::Int;
      item.index = static_cast<int64_t>(fg::item(item.tensor));
    }
  } else {
    item.index = int_arg(obj, "an index");
  }
  return item;
}


std::string grad_fn_repr(const Tensor& t) {
  auto fn = grad_fn(t);
  if (!fn) return "None";
  std::string name = fn->name();
  name[0] = static_cast<char>(std::toupper(name[0]));
  return "<" + name + "Backward>";
}

py::object scalar_value(const Tensor& t) {
  FG_CHECK(t.numel() == 1, Value, "item: only one-element tensors can be converted to Python ",
           "scalars, got shape ", to_string(t.shape()));
  notify_host_read(t, "item");
  Tensor c = t.device().is_cpu() ? raw::contiguous(t) : to_device(detach(t), cpu_device());
  return visit_dtype(c.dtype(), [&](auto tag) -> py::object {
    using T = decltype(tag);
    T v = *c.data<T>();
    if constexpr (std::is_same_v<T, bool>) return py::bool_(v);
    else if constexpr (std::is_integral_v<T>) return py::int_(static_cast<int64_t>(v));
    else return py::float_(static_cast<double>(v));
  });
}

using Binary = Tensor (*)(const Tensor&, const Tensor&);

// self <op> other, and other <op> self for the reflected form (binary_operands decides dtypes).
auto forward_op(const char* op, Binary fn) {
  return named(op, [fn](const py::object& self, const py::object& other) {
    std::pair<Tensor, Tensor> operands = binary_operands(self, other);  // (clang 14 cannot capture bindings)
    return released([&] { return fn(operands.first, operands.second); });
  });
}
auto reflected_op(const char* op, Binary fn) {
  return named(op, [fn](const py::object& self, const py::object& other) {
    std::pair<Tensor, Tensor> operands = binary_operands(other, self);
    return released([&] { return fn(operands.first, operands.second); });
  });
}

// What Tensor.register_hook returns: remove() (or leaving a `with` block) takes the hook off.
struct HookHandle {
  Tensor tensor;
  int64_t id;
};

// A Python hook as a GradHook: the function is called, and finally freed, holding the GIL (backward
// runs without it); its result must be a Tensor or None.
GradHook python_hook(const py::function& fn) {
  std::shared_ptr<py::function> held(new py::function(fn), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
  return [held](const Tensor& grad) -> std::optional<Tensor> {
    py::gil_scoped_acquire gil;
    py::object out = (*held)(grad);
    if (out.is_none()) return std::nullopt;
    if (!py::isinstance<Tensor>(out))
      throw py::type_error(std::string("register_hook: the hook returned ") + Py_TYPE(out.ptr())->tp_name +
                           "; expected a Tensor (the new gradient) or None");
    return out.cast<Tensor>();
  };
}

}  // namespace

std::vector<IndexItem> index_items(const py::handle& key) {
  std::vector<IndexItem> items;
  if (py::isinstance<py::tuple>(key)) {
    for (py::handle k : key) items.push_back(index_item(k));
  } else {
    items.push_back(index_item(key));
  }
  return items;
}

void bind_tensor(py::module_& m) {
  py::class_<HookHandle>(m, "HookHandle", "Returned by Tensor.register_hook; remove() takes the hook off.")
      .def("remove", [](const HookHandle& h) { remove_grad_hook(h.tensor, h.id); },
           "Takes the hook off (again: nothing happens).")
      .def("__enter__", [](const py::object& self) { return self; })
      .def("__exit__", [](const HookHandle& h, const py::args&) { remove_grad_hook(h.tensor, h.id); },
           "Takes the hook off at the end of a with block.");
  py::class_<Tensor> cls(m, "Tensor", py::buffer_protocol(),
                         "An n-dimensional array on a device, with autograd.");
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape().vec())); },
                            "The sizes of the dims, as a tuple.")
      .def_property_readonly("ndim", &Tensor::ndim, "Number of dims.")
      .def_property_readonly("dtype", &Tensor::dtype, "Element type.")
      .def_property_readonly("device", &Tensor::device, "Device holding the data.")
      .def("numel", &Tensor::numel, "Number of elements.")
      .def("dim", &Tensor::ndim, "Number of dims.")
      .def("size", named("size", [](const Tensor& t, const py::object& dim) -> py::object {
        if (dim.is_none()) return py::tuple(py::cast(t.shape().vec()));
        return py::int_(t.shape()[wrap_dim(int_arg(dim, "dim"), t.ndim(), "size")]);
      }), py::arg("dim") = py::none(), "The shape, or the size of one dim.")
      .def("stride", [](const Tensor& t) { return py::tuple(py::cast(t.strides().vec())); },
           "Strides in elements.")
      .def("is_contiguous", &Tensor::is_contiguous, "True when the layout is row-major compact.")
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); },
           "Address of the first element.")
      .def("__len__", [](const Tensor& t) {
        FG_CHECK(t.ndim() > 0, Value, "len() of a 0-d tensor");
        return t.shape()[0];
      })
      .def("item", named("item", &scalar_value), "The value of a one-element tensor as a Python scalar.")
      // Python's own conversions of the scalar, like PyTorch: int(fg.tensor(2.7)) == 2.
      .def("__float__", named("float", [](const Tensor& t) { return py::float_(scalar_value(t)); }))
      .def("__int__", named("int", [](const Tensor& t) { return py::int_(scalar_value(t)); }))
      .def("__bool__", named("bool", [](const Tensor& t) { return py::bool_(scalar_value(t)); }))
      .def("__index__", named("index", [](const Tensor& t) {
        FG_CHECK(is_integral(t.dtype()), DType, "only integer tensors can be used as an index, got ", describe(t));
        return py::int_(scalar_value(t));
      }))
      .def_property("requires_grad", [](const Tensor& t) { return requires_grad(t); },
                    [](const Tensor& t, bool v) { set_requires_grad(t, v); },
                    "Whether autograd records ops on this tensor.")
      .def("requires_grad_", [](const Tensor& t, bool v) { set_requires_grad(t, v); return t; },
           py::arg("requires_grad") = true, "Sets requires_grad in place and returns self.")
      .def_property("grad", [](const Tensor& t) -> py::object {
        Tensor g = grad_of(t);
        return g.defined() ? py::cast(g) : py::none();
      }, named("grad", [](const Tensor& t, const py::object& g) {
        if (!g.is_none() && !py::isinstance<Tensor>(g))
          throw py::type_error("assigned gradient must be a Tensor or None, got " + std::string(Py_TYPE(g.ptr())->tp_name));
        set_grad(t, g.is_none() ? Tensor() : g.cast<Tensor>());
      }), "The accumulated gradient (None until backward reaches this leaf).")
      .def("register_hook", [](const Tensor& t, const py::function& hook) {
        return HookHandle{t, add_grad_hook(t, python_hook(hook))};
      }, py::arg("hook"), "hook(grad) runs when backward has computed this tensor's gradient (a leaf's: "
         "the pass's sum, before it is added to .grad); a Tensor it returns replaces the gradient, None keeps "
         "it. fg.autograd.grad returns a leaf's gradient after its hooks, a non-leaf's before them (as "
         "PyTorch does). Returns a handle whose remove() takes the hook off.")
      .def_property_readonly("is_leaf", [](const Tensor& t) { return is_leaf(t); },
                             "True unless the tensor was produced by a recorded op.")
      .def_property_readonly("grad_fn", [](const Tensor& t) -> py::object {
        auto fn = grad_fn(t);
        if (!fn) return py::none();
        return py::str(grad_fn_repr(t));
      }, "Name of the op that produced this tensor, for display.")
      .def("backward", named("backward", [](const Tensor& t, const py::object& gradient, bool retain_graph,
                                             bool create_graph) {
        Tensors grads{gradient.is_none() ? Tensor() : as_tensor(gradient, &t)};
        py::gil_scoped_release release;
        backward({t}, grads, retain_graph, create_graph);
      }), py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
         py::arg("create_graph") = false, "Accumulates d(self)/d(leaf) into every leaf's .grad.")
      .def("detach", &detach, "A view of the same data without autograd history.")
      .def("__getitem__", named("index", [](const Tensor& t, const py::object& key) {
        return index(t, index_items(key));
      }))
      .def("_grad_fn_repr", &grad_fn_repr);

  cls.def("__add__", forward_op("add", add)).def("__radd__", reflected_op("add", add))
      .def("__sub__", forward_op("sub", sub)).def("__rsub__", reflected_op("sub", sub))
      .def("__mul__", forward_op("mul", mul)).def("__rmul__", reflected_op("mul", mul))
      .def("__truediv__", forward_op("div", div)).def("__rtruediv__", reflected_op("div", div))
      .def("__pow__", forward_op("pow", pow)).def("__rpow__", reflected_op("pow", pow))
      .def("__matmul__", forward_op("matmul", matmul)).def("__rmatmul__", reflected_op("matmul", matmul))
      .def("__eq__", forward_op("eq", eq)).def("__ne__", forward_op("ne", ne))
      .def("__lt__", forward_op("lt", lt)).def("__le__", forward_op("le", le))
      .def("__gt__", forward_op("gt", gt)).def("__ge__", forward_op("ge", ge))
      .def("__neg__", [](const Tensor& t) { return neg(t); })
      .def("__abs__", [](const Tensor& t) { return abs(t); })
      .def("__pos__", [](const Tensor& t) { return t; })
      .def("__and__", forward_op("bitwise_and", bitwise_and)).def("__rand__", reflected_op("bitwise_and", bitwise_and))
      .def("__or__", forward_op("bitwise_or", bitwise_or)).def("__ror__", reflected_op("bitwise_or", bitwise_or))
      .def("__xor__", forward_op("bitwise_xor", bitwise_xor)).def("__rxor__", reflected_op("bitwise_xor", bitwise_xor))
      .def("__invert__", [](const Tensor& t) { return bitwise_not(t); });
  cls.def("__hash__", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl()); });
  bind_in_place(cls);
  bind_interop(m, cls);
}

}  // namespace fg::py_bind
