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
// fg.tensor(data, dtype, device): always a copy.
Tensor tensor_from_data(const py::handle& data, std::optional<DType> dtype, Device device);
Tensor from_numpy(const py::array& array);
py::array to_numpy(const Tensor& t);

// Module call plumbing: Python call arguments as a tensor list (tuples flattened, None kept),
// a tensor list as a Python result, and Python class names as module type names.
Tensors tensors_of(const py::handle& obj, const char* what);
py::object result_of(const Tensors& out);
void sync_type_names(nn::Module& root);

void bind_tensor(py::module_& m);
void bind_interop(py::module_& m, py::class_<Tensor>& cls);
void bind_ops(py::module_& m);
void bind_runtime(py::module_& m);
void bind_nn(py::module_& m);
void bind_optim(py::module_& m);
void bind_io(py::module_& m);
void bind_observe(py::module_& m);
void bind_graph(py::module_& m);
void bind_distributed(py::module_& m);

}  // namespace fg::py_bind
