// Fast paths for the hottest Python calls on tensors. The arithmetic operators (a + b, a * 2.0,
// 1 - a, a @ b) run from Python's number slots straight to the op when both operands are tensors
// of exactly fg.Tensor's type, or one is and the other a Python int, float or bool: no pybind11
// method lookup, overload dispatch or type-registry search per call. Every other operand (lists,
// arrays, foreign types, subclasses) goes to the bound __add__/__radd__ methods as before, so
// results, dtype promotion and errors are those of the bound methods (tests/test_fast_paths.py).
#include "common.h"

namespace fg::py_bind {
namespace {

using Binary = Tensor (*)(const Tensor&, const Tensor&);

PyTypeObject* g_tensor_type = nullptr;
const py::detail::type_info* g_tensor_info = nullptr;

// Ops whose operands have at most this many elements (and so their broadcast result, at most
// the product) keep the GIL: releasing and taking it back costs more than such an op.
constexpr int64_t kKeepGilNumel = 1 << 14;

// The Tensor a Python object holds when its type is exactly fg.Tensor, else nullptr.
const Tensor* exact_tensor(PyObject* obj) {
  if (Py_TYPE(obj) != g_tensor_type) return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  if (!inst->simple_layout || !inst->simple_holder_constructed) return nullptr;
  return static_cast<const Tensor*>(inst->simple_value_holder[0]);
}

// A Python scalar that binary_operands turns into a weak-typed tensor.
bool is_scalar(PyObject* obj) { return PyFloat_CheckExact(obj) || PyLong_Check(obj); }

Tensor run(Binary fn, const Tensor& a, const Tensor& b) {
  int64_t na = a.numel(), nb = b.numel();
  if (na <= kKeepGilNumel && nb <= kKeepGilNumel && na * nb <= kKeepGilNumel) return fn(a, b);
  py::gil_scoped_release release;
  return fn(a, b);
}

// A new Python fg.Tensor owning t (the registered type found once, not per call).
PyObject* wrap(Tensor t) {
  auto move = [](const void* p) -> void* { return new Tensor(std::move(*static_cast<Tensor*>(const_cast<void*>(p)))); };
  return py::detail::type_caster_generic::cast(&t, py::return_value_policy::move, py::handle(), g_tensor_info,
                                               nullptr, move).ptr();
}

struct OperatorSlot {
  const char* op;         // for error messages, as the bound method names it
  const char* method;     // the bound methods the slow path calls
  const char* reflected;
  Binary fn;
  binaryfunc PyNumberMethods::*slot;
};

const OperatorSlot kOperators[] = {
    {"add", "__add__", "__radd__", add, &PyNumberMethods::nb_add},
    {"sub", "__sub__", "__rsub__", sub, &PyNumberMethods::nb_subtract},
    {"mul", "__mul__", "__rmul__", mul, &PyNumberMethods::nb_multiply},
    {"div", "__truediv__", "__rtruediv__", div, &PyNumberMethods::nb_true_divide},
    {"matmul", "__matmul__", "__rmatmul__", matmul, &PyNumberMethods::nb_matrix_multiply}};

// What CPython's own slot for a class defining both methods does: a.__add__(b) when a is a
// tensor, then b.__radd__(a) when b is a tensor of another type and a declined.
PyObject* bound_methods(const OperatorSlot& s, PyObject* a, PyObject* b) {
  if (PyObject_TypeCheck(a, g_tensor_type)) {
    PyObject* r = PyObject_CallMethodOneArg(a, py::str(s.method).ptr(), b);
    if (r != Py_NotImplemented || Py_TYPE(a) == Py_TYPE(b)) return r;
    Py_DECREF(r);
  }
  if (PyObject_TypeCheck(b, g_tensor_type) && Py_TYPE(a) != Py_TYPE(b))
    return PyObject_CallMethodOneArg(b, py::str(s.reflected).ptr(), a);
  Py_RETURN_NOTIMPLEMENTED;
}

// op(a, b) for operands `fast` accepts, with the errors the bound functions raise (naming op).
PyObject* binary_call(const char* op, Binary fn, PyObject* a, PyObject* b) {
  try {
    try {
      const Tensor* ta = exact_tensor(a);
      const Tensor* tb = exact_tensor(b);
      if (ta && tb) return wrap(run(fn, *ta, *tb));
      std::pair<Tensor, Tensor> operands = binary_operands(a, b);
      return wrap(run(fn, operands.first, operands.second));
    } catch (...) {
      rethrow_naming(op);
    }
  } catch (...) {
    py::detail::try_translate_exceptions();
  }
  return nullptr;
}

// Operands the fast paths take: two fg.Tensor objects, or one and a Python scalar.
bool fast(PyObject* a, PyObject* b) {
  bool ta = exact_tensor(a), tb = exact_tensor(b);
  return (ta && tb) || (ta && is_scalar(b)) || (tb && is_scalar(a));
}

template <size_t I>
PyObject* operator_slot(PyObject* a, PyObject* b) {
  const OperatorSlot& s = kOperators[I];
  return fast(a, b) ? binary_call(s.op, s.fn, a, b) : bound_methods(s, a, b);
}

template <size_t... I>
void install_operators(PyNumberMethods* number, std::index_sequence<I...>) {
  ((number->*kOperators[I].slot = &operator_slot<I>), ...);
}

// fg.add(a, b) and friends: a function that calls the op for two positional operands `fast`
// takes and hands any other call to the pybind11 function it replaced (`original`, its self).
using Vectorcall = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*);
const std::pair<const char*, Binary> kFunctions[] = {{"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}};

template <size_t I>
PyObject* function_call(PyObject* original, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) == 2 && !kwnames && fast(args[0], args[1]))
    return binary_call(kFunctions[I].first, kFunctions[I].second, args[0], args[1]);
  return PyObject_Vectorcall(original, args, nargsf, kwnames);
}

// t.add_(other) and friends: the op for an fg.Tensor self and a tensor or scalar `other`, else the
// bound method. Like the bound methods these keep the GIL and name no op in conversion errors.
const std::pair<const char*, Binary> kInPlace[] = {{"add_", add_}, {"sub_", sub_}, {"mul_", mul_}, {"div_", div_}};
PyObject* g_in_place_originals[std::size(kInPlace)];

template <size_t I>
PyObject* in_place_call(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  const Tensor* t = exact_tensor(self);
  if (t && n == 1 && !kwnames && (exact_tensor(args[0]) || is_scalar(args[0]))) {
    try {
      const Tensor* other = exact_tensor(args[0]);
      kInPlace[I].second(*t, other ? *other : as_tensor(args[0], t));
      return Py_NewRef(self);
    } catch (...) {
      py::detail::try_translate_exceptions();
      return nullptr;
    }
  }
  std::vector<PyObject*> with_self{self};  // the bound method takes self first
  with_self.insert(with_self.end(), args, args + n + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0));
  return PyObject_Vectorcall(g_in_place_originals[I], with_self.data(), n + 1, kwnames);
}

// A PyMethodDef that lives as long as the module, with the replaced function's docstring (its
// signature line included, so help() and the generated stubs read as before).
PyMethodDef* method_def(const char* name, Vectorcall call, const py::handle& original) {
  auto* doc = new std::string(py::str(original.attr("__doc__")));
  return new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)),
                         METH_FASTCALL | METH_KEYWORDS, doc->c_str()};
}

template <size_t... I>
void install_functions(py::module_& m, std::index_sequence<I...>) {
  (void)std::initializer_list<int>{(
      [&] {
        py::object original = m.attr(kFunctions[I].first);
        PyMethodDef* def = method_def(kFunctions[I].first, &function_call<I>, original);
        m.attr(kFunctions[I].first) = py::reinterpret_steal<py::object>(
            PyCFunction_NewEx(def, original.release().ptr(), m.attr("__name__").ptr()));
      }(), 0)...};
}

template <size_t... I>
void install_in_place(std::index_sequence<I...>) {
  PyObject* dict = g_tensor_type->tp_dict;
  (void)std::initializer_list<int>{(
      [&] {
        PyObject* original = PyDict_GetItemString(dict, kInPlace[I].first);
        g_in_place_originals[I] = Py_NewRef(original);
        PyMethodDef* def = method_def(kInPlace[I].first, &in_place_call<I>, original);
        py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewMethod(g_tensor_type, def));
        PyDict_SetItemString(dict, kInPlace[I].first, descr.ptr());
      }(), 0)...};
}

}  // namespace

void bind_fast_paths(py::module_& m) {
  g_tensor_type = reinterpret_cast<PyTypeObject*>(m.attr("Tensor").ptr());
  g_tensor_info = py::detail::get_type_info(typeid(Tensor));
  install_operators(g_tensor_type->tp_as_number, std::make_index_sequence<std::size(kOperators)>());
  install_in_place(std::make_index_sequence<std::size(kInPlace)>());
  PyType_Modified(g_tensor_type);
  install_functions(m, std::make_index_sequence<std::size(kFunctions)>());
}

}  // namespace fg::py_bind
