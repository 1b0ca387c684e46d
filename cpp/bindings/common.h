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

// OverflowError (pybind11 has builtin exception classes for TypeError and others, not this one).
class overflow_error : public py::builtin_exception {
 public:
  using builtin_exception::builtin_exception;
  void set_error() const override { PyErr_SetString(PyExc_OverflowError, what()); }
};

// Inside a catch block: rethrows the exception being handled so that its message names `op`
// (fg errors, TypeError and OverflowError that do not already), and pybind11 cast errors,
// std::bad_alloc and std::length_error as TypeError / OutOfMemoryError instead of C++ text.
[[noreturn]] void rethrow_naming(const char* op);
// A pybind11 cast error's text without C++ type names; the text for std::length_error.
std::string cast_error_message(const std::string& what);
constexpr const char* kTooLarge = "a requested size is too large to allocate";

// `fn` as a binding whose errors name `op` (see rethrow_naming); same signature as fn.
template <class Fn, class R, class... Args>
auto named_impl(const char* op, Fn fn, R (*)(Args...)) {
  return [op, fn = std::move(fn)](Args... args) -> R {
    try {
      return fn(std::forward<Args>(args)...);
    } catch (...) {
      rethrow_naming(op);
    }
  };
}
template <class Fn>
auto named(const char* op, Fn fn) {
  return named_impl(op, std::move(fn), static_cast<py::detail::function_signature_t<Fn>*>(nullptr));
}
// scope.def(name, fn, extra...) with errors naming the op.
template <class Scope, class Fn, class... Extra>
void def_op(Scope& scope, const char* name, Fn&& fn, const Extra&... extra) {
  scope.def(name, named(name, std::forward<Fn>(fn)), extra...);
}

// Argument conversion: TypeError names the argument and what was given, OverflowError an int
// that does not fit in 64 bits; the op is named by `named`.
// None, "cpu", "cuda:0" or a Device.
Device device_arg(const py::handle& obj, Device fallback = cpu_device());
std::optional<DType> dtype_arg(const py::handle& obj);
int64_t int_arg(const py::handle& obj, const char* arg);
double float_arg(const py::handle& obj, const char* arg);
// None (every dim), an int, or a sequence of ints.
Dims dims_arg(const py::handle& obj, const char* arg = "dim");
// A shape from *args: fg.zeros(2, 3) or fg.zeros((2, 3)).
Dims shape_args(const py::args& args, const char* arg = "shape");
// An int or a sequence of ints.
std::vector<int64_t> int_list(const py::handle& obj, const char* arg = "argument");

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
// fast_paths.cpp, after bind_tensor and bind_ops: operator slots and fg.add-style functions in C.
void bind_fast_paths(py::module_& m);
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
void bind_distributed(py::module_& m);
void bind_mixed(py::module_& m);

}  // namespace fg::py_bind
