// Argument conversion shared by the binding files. No numerics here.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/nn/module.h"
#include "flowgrad/ops/ops.h"

namespace fg::py_bind {

namespace py = pybind11;

// None, "cpu", "cuda:0" or a Device.
Device device_arg(const py::handle& obj, Device fallback = cpu_device());
std::optional<DType> dtype_arg(const py::handle& obj);
// None (every dim), an int, or a sequence of ints.
Dims dims_arg(const py::handle& obj);
// A shape from *args: fg.zeros(2, 3) or fg.zeros((2, 3)).
Dims shape_args(const py::args& args);
std::vector<int64_t> int_list(const py::handle& obj);

// Any operand (Tensor, Python scalar, NumPy array, list) as a tensor. A Python scalar takes
// `like`'s dtype where NumPy's weak-scalar rules say so.
Tensor as_tensor(const py::handle& obj, const Tensor* like = nullptr);
// Both operands of a binary op. A Python float with a bool or integer tensor makes both the
// default float dtype (PyTorch's rule: int_tensor * 0.5 is float32, not NumPy's float64).
std::pair<Tensor, Tensor> binary_operands(const py::handle& a, const py::handle& b);
// fg.tensor(data, dtype, device): always a copy.
Tensor tensor_from_data(const py::handle& data, std::optional<DType> dtype, Device device);
Tensor from_numpy(const py::array& array);
// A Python index (int, slice, None, ..., tensor, list, NumPy array, or a tuple of them).
std::vector<IndexItem> index_items(const py::handle& key);
py::array to_numpy(const Tensor& t);

// Module call plumbing: Python call arguments as a tensor list (tuples flattened, None kept),
// a tensor list as a Python result, and Python class names as module type names.
Tensors tensors_of(const py::handle& obj, const char* what);
py::object result_of(const Tensors& out);
void sync_type_names(nn::Module& root);
bool is_python_module(const nn::Module& m);  // a Python subclass of fg.nn.Module

// Runs fn with the GIL released, so other Python threads run during long ops. fn must not touch
// Python objects (convert arguments before); Python modules called inside take the GIL back.
template <class Fn>
auto released(Fn&& fn) {
  py::gil_scoped_release release;
  return fn();
}
using ReleaseGil = py::call_guard<py::gil_scoped_release>;  // the same for all-C++ signatures

void bind_tensor(py::module_& m);
void bind_interop(py::module_& m, py::class_<Tensor>& cls);
void bind_in_place(py::class_<Tensor>& cls);
void bind_ops(py::module_& m);
void bind_runtime(py::module_& m);
void bind_nn(py::module_& m);
void bind_layers(py::module_& m);  // called by bind_nn
void bind_optim(py::module_& m);
void bind_io(py::module_& m);
void bind_observe(py::module_& m);
void bind_graph(py::module_& m);
void bind_plan(py::module_& m);
void bind_pickle(py::module_& m);

}  // namespace fg::py_bind
