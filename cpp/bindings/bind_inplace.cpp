// In-place Tensor methods (add_, fill_, ...), augmented assignment and t[idx] = value. Each
// writes into self through a registered in-place op and returns self, the same Python object,
// so `p -= lr * p.grad` and `q = p; p += 1` update the one tensor both names refer to.
#include "common.h"

namespace fg::py_bind {
namespace {

using InPlaceBinary = Tensor (*)(const Tensor&, const Tensor&);

const Tensor& self_of(const py::object& self) { return self.cast<const Tensor&>(); }

// `other` times alpha (PyTorch's add_(other, alpha=...)); alpha is a weak Python scalar.
Tensor scaled(const Tensor& self, const py::object& other, double alpha) {
  Tensor o = as_tensor(other, &self);
  return alpha == 1.0 ? o : mul(o, as_tensor(py::float_(alpha), &o));
}

template <InPlaceBinary Fn>
py::object binary(const py::object& self, const py::object& other) {
  Fn(self_of(self), as_tensor(other, &self_of(self)));
  return self;
}

template <InPlaceBinary Fn>
py::object binary_alpha(const py::object& self, const py::object& other, double alpha) {
  Fn(self_of(self), scaled(self_of(self), other, alpha));
  return self;
}

}  // namespace

void bind_in_place(py::class_<Tensor>& cls) {
  cls.def("add_", &binary_alpha<add_>, py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0,
          "self += alpha * other in place (broadcast to self's shape); returns self.")
      .def("sub_", &binary_alpha<sub_>, py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0,
           "self -= alpha * other in place; returns self.")
      .def("mul_", &binary<mul_>, py::arg("other"), "self *= other in place; returns self.")
      .def("div_", &binary<div_>, py::arg("other"),
           "self /= other in place (a float tensor: an integer one cannot hold the quotient); returns self.")
      .def("pow_", &binary<pow_>, py::arg("exponent"), "self = self ** exponent in place; returns self.")
      .def("__iadd__", &binary<add_>).def("__isub__", &binary<sub_>)
      .def("__imul__", &binary<mul_>).def("__itruediv__", &binary<div_>).def("__ipow__", &binary<pow_>)
      .def("neg_", [](const py::object& self) { neg_(self_of(self)); return self; }, "Negates in place; returns self.")
      .def("relu_", [](const py::object& self) { relu_(self_of(self)); return self; },
           "max(self, 0) in place; returns self.")
      .def("clamp_", [](const py::object& self, std::optional<double> lo, std::optional<double> hi) {
        clamp_(self_of(self), lo, hi);
        return self;
      }, py::arg("min") = py::none(), py::arg("max") = py::none(),
         "Limits values to [min, max] in place (either bound may be None); returns self.")
      .def("zero_", [](const py::object& self) { zero_(self_of(self)); return self; },
           "Fills with zeros in place; returns self.")
      .def("fill_", [](const py::object& self, double value) { fill_(self_of(self), value); return self; },
           py::arg("value"), "Fills with a value in place; returns self.")
      .def("copy_", [](const py::object& self, const py::object& src) {
        const Tensor& t = self_of(self);
        copy_(t, to_device(as_tensor(src, &t), t.device()));
        return self;
      }, py::arg("src"), "Copies src (broadcast, cast, moved to self's device) into self in place; returns self.")
      .def("put_", [](const py::object& self, const Tensor& index, const Tensor& source) {
        index_put_(self_of(self), index, source);
        return self;
      }, py::arg("index"), py::arg("source"),
         "Writes source (broadcast to index's shape) at the int64 positions of index into self read as "
         "1-D in row-major order, in place (PyTorch's put_; the op index_put_, behind t[idx] = v). "
         "Indices are checked on the device; a repeated index keeps one of its values. Returns self.")
      .def("masked_fill_", [](const py::object& self, const Tensor& mask, double value) {
        masked_fill_(self_of(self), mask, value);
        return self;
      }, py::arg("mask"), py::arg("value"), "Writes value where the (broadcast) bool mask is True; returns self.")
      .def("uniform_", [](const py::object& self, double low, double high) {
        uniform_(self_of(self), low, high);
        return self;
      }, py::arg("from") = 0.0, py::arg("to") = 1.0, "Fills with uniform samples from [from, to); returns self.")
      .def("normal_", [](const py::object& self, double mean, double std) {
        normal_(self_of(self), mean, std);
        return self;
      }, py::arg("mean") = 0.0, py::arg("std") = 1.0, "Fills with normal samples N(mean, std^2); returns self.")
      .def("__setitem__", [](const Tensor& t, const py::object& key, const py::object& value) {
        assign_index(t, index_items(key), to_device(as_tensor(value, &t), t.device()));
      })
      .def_property_readonly("_version", [](const Tensor& t) { return t.storage()->version(); },
                             "How many in-place writes the tensor's memory has had (views share it).");
}

}  // namespace fg::py_bind
