// flowgrad._core: the compiled engine. Exceptions, dtypes and devices are defined here; the
// tensor, op and runtime bindings live in bind_*.cpp.
#include <Python.h>

#include "common.h"
#include "flowgrad/core/env.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/ops/autocast.h"
#include "kernels/common/cpu_dispatch.h"
#include "kernels/linalg/sgemm.h"
#include "kernels/nn/nn.h"

namespace fg::py_bind {
namespace {

PyObject* make_error(py::module_& m, const char* name, const char* doc, PyObject* bases) {
  std::string qualified = std::string("flowgrad.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

void bind_errors(py::module_& m) {
  static PyObject* base = make_error(m, "FlowgradError", "Base class of every flowgrad error.", PyExc_Exception);
  auto with = [&](PyObject* builtin) { return py::make_tuple(py::handle(base), py::handle(builtin)).release().ptr(); };
  static PyObject* shape = make_error(m, "ShapeError", "Shapes do not fit the op.", with(PyExc_ValueError));
  static PyObject* dtype = make_error(m, "DTypeError", "A dtype is not supported by the op.", with(PyExc_TypeError));
  static PyObject* device = make_error(m, "DeviceError", "Tensors on the wrong or mixed devices.", with(PyExc_RuntimeError));
  static PyObject* graph = make_error(m, "GraphError", "An invalid flow graph.", with(PyExc_ValueError));
  static PyObject* checkpoint = make_error(m, "CheckpointError", "A malformed or unreadable checkpoint.", with(PyExc_ValueError));
  static PyObject* oom = make_error(m, "OutOfMemoryError", "An allocation could not be met.", with(PyExc_MemoryError));
  static PyObject* index = make_error(m, "IndexOutOfRangeError", "An index outside a dimension.", with(PyExc_IndexError));
  static PyObject* value = make_error(m, "InvalidArgumentError", "An argument value the op does not accept.", with(PyExc_ValueError));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = base;
      switch (e.kind()) {
        case ErrorKind::Shape: cls = shape; break;
        case ErrorKind::DType: cls = dtype; break;
        case ErrorKind::Device: cls = device; break;
        case ErrorKind::Graph: cls = graph; break;
        case ErrorKind::Checkpoint: cls = checkpoint; break;
        case ErrorKind::OutOfMemory: cls = oom; break;
        case ErrorKind::Index: cls = index; break;
        case ErrorKind::Value: cls = value; break;
        case ErrorKind::Runtime: cls = base; break;
        case ErrorKind::Timeout: cls = PyExc_TimeoutError; break;
      }
      PyErr_SetString(cls, e.what());
    } catch (const py::cast_error& e) {  // conversions outside `named` bindings: still typed
      PyErr_SetString(PyExc_TypeError, cast_error_message(e.what()).c_str());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(oom, "out of memory");
    } catch (const std::length_error&) {
      PyErr_SetString(oom, kTooLarge);
    }
  });
}

void bind_dtypes(py::module_& m) {
  py::enum_<DType> dtype(m, "dtype", "A tensor element type (fg.float32, fg.int64, ...).");
  for (DType dt : kAllDTypes) {
    dtype.value(dtype_name(dt), dt);
    m.attr(dtype_name(dt)) = dt;
  }
  dtype.def_property_readonly("itemsize", [](DType d) { return itemsize(d); }, "Bytes per element.")
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); },
                             "True for float16, bfloat16, float32 and float64.");
  m.def("promote_types", &promote, py::arg("a"), py::arg("b"),
        "The dtype NumPy's promotion rules give for an op on a and b.");
  m.def("set_default_dtype", &set_default_float_dtype, py::arg("dtype"),
        "Sets the float dtype (float32 or float64) of Python floats, float creation functions and "
        "integer true division, mean, exp, ... (PyTorch's default dtype).");
  m.def("get_default_dtype", &default_float_dtype, "The default float dtype (float32 unless set).");

  py::class_<Device>(m, "device", "A device: fg.device('cpu'), fg.device('cuda:0').")
      .def(py::init([](const py::object& spec) { return device_arg(spec); }), py::arg("spec"))
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; }, "'cpu' or 'cuda'.")
      .def_property_readonly("index", [](const Device& d) -> py::object {
        return d.is_cpu() ? py::object(py::none()) : py::object(py::int_(d.index));
      }, "The CUDA device number (None for the CPU).")
      .def("__eq__", [](const Device& d, const py::object& o) {
        if (py::isinstance<Device>(o) || py::isinstance<py::str>(o)) return d == device_arg(o);
        return false;
      })
      .def("__hash__", [](const Device& d) { return std::hash<std::string>()(d.str()); })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "device('" + d.str() + "')"; });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "flowgrad's C++ engine: tensors, ops, autograd.";
  install_autocast();
  install_autograd();
  cuda::install();  // the caching allocator behind CUDA storage
  num_threads();  // sizes the CPU pool and BLAS from FLOWGRAD_NUM_THREADS
  set_cpu_isa(env::cpu_isa());  // FLOWGRAD_ISA, before anything asks the level
  set_sgemm(env::sgemm_avx512() ? Sgemm::Avx512 : Sgemm::Blas);  // FLOWGRAD_SGEMM
  set_conv_kernel(conv_kernel_named(env::conv_kernel()));  // FLOWGRAD_CONV
  bind_errors(m);
  bind_dtypes(m);
  bind_tensor(m);
  bind_ops(m);
  bind_fast_paths(m);
  bind_runtime(m);
  bind_nn(m);
  bind_optim(m);
  bind_io(m);
  bind_observe(m);
  bind_graph(m);
  bind_plan(m);
  bind_pickle(m);
  bind_distributed(m);
  bind_mixed(m);
}

}  // namespace fg::py_bind
