// Python arguments as engine values. Every conversion failure is typed: TypeError for a value of
// the wrong kind, OverflowError for an integer that does not fit, fg errors otherwise; `named`
// (common.h) adds the op's name. Nothing here lets a pybind11 cast error or a C++ runtime
// message reach the user.
#include <climits>

#include "common.h"

namespace fg::py_bind {
namespace {

// "str 'a'": the type and a short repr of a rejected argument.
std::string shown(const py::handle& obj) {
  std::string text = py::repr(obj).cast<std::string>();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(Py_TYPE(obj.ptr())->tp_name) + " " + text;
}


// An int, a NumPy integer or anything else with __index__, but not an array of several values.
bool is_int_like(const py::handle& obj) {
  if (!PyIndex_Check(obj.ptr())) return false;
  return !py::isinstance<py::array>(obj) || py::reinterpret_borrow<py::array>(obj).ndim() == 0;
}

}  // namespace

std::string cast_error_message(const std::string& what) {
  size_t at = what.find("<class '");  // "... instance of type <class 'str'> to C++ type ..."
  size_t end = at == std::string::npos ? at : what.find("'>", at);
  if (end == std::string::npos) return "an argument has an unsupported type";
  return "an argument of type " + what.substr(at + 8, end - at - 8) + " is not supported here";
}

void rethrow_naming(const char* op) {
  auto named = [op](const std::string& message) {
    return message.rfind(op, 0) == 0 ? message : std::string(op) + ": " + message;
  };
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.kind(), named(e.what()));
  } catch (const py::cast_error& e) {
    throw py::type_error(named(cast_error_message(e.what())));
  } catch (const py::type_error& e) {
    throw py::type_error(named(e.what()));
  } catch (const overflow_error& e) {
    throw overflow_error(named(e.what()));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::OutOfMemory, named("out of memory"));
  } catch (const std::length_error&) {
    throw Error(ErrorKind::OutOfMemory, named(kTooLarge));
  }
}

Device device_arg(const py::handle& obj, Device fallback) {
  if (obj.is_none()) return fallback;
  if (py::isinstance<Device>(obj)) return obj.cast<Device>();
  if (py::isinstance<py::str>(obj)) return Device::parse(obj.cast<std::string>());
  fail(ErrorKind::Device, "expected a device such as 'cpu' or 'cuda:0', got ", shown(obj));
}

std::optional<DType> dtype_arg(const py::handle& obj) {
  if (obj.is_none()) return std::nullopt;
  if (py::isinstance<DType>(obj)) return obj.cast<DType>();
  if (py::isinstance<py::str>(obj)) return dtype_from_name(obj.cast<std::string>());
  fail(ErrorKind::DType, "expected a flowgrad dtype such as fg.float32, got ", shown(obj));
}

int64_t int_arg(const py::handle& obj, const char* arg) {
  if (!is_int_like(obj)) throw py::type_error(std::string(arg) + " must be an int, got " + shown(obj));
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow) throw overflow_error(std::string(arg) + " = " + shown(obj) + " does not fit in 64 bits");
  return v;
}

double float_arg(const py::handle& obj, const char* arg) {
  double v = PyFloat_AsDouble(obj.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    bool overflow = PyErr_ExceptionMatches(PyExc_OverflowError);
    PyErr_Clear();
    if (overflow) throw overflow_error(std::string(arg) + " = " + shown(obj) + " is too large for a float");
    throw py::type_error(std::string(arg) + " must be a number, got " + shown(obj));
  }
  return v;
}

std::vector<int64_t> int_list(const py::handle& obj, const char* arg) {
  if (is_int_like(obj)) return {int_arg(obj, arg)};
  bool sequence = py::isinstance<py::sequence>(obj) && !py::isinstance<py::str>(obj) && !py::isinstance<py::bytes>(obj);
  if (!sequence && !py::isinstance<py::array>(obj))
    throw py::type_error(std::string(arg) + " must be an int or a sequence of ints, got " + shown(obj));
  std::vector<int64_t> out;
  for (py::handle item : obj) out.push_back(int_arg(item, arg));
  return out;
}

Dims dims_arg(const py::handle& obj, const char* arg) {
  if (obj.is_none()) return Dims{};
  return Dims(int_list(obj, arg));
}

Dims shape_args(const py::args& args, const char* arg) {
  if (args.size() == 1 && !is_int_like(args[0])) return Dims(int_list(args[0], arg));
  Dims shape;
  for (py::handle a : args) shape.push_back(int_arg(a, arg));
  return shape;
}

// The range a Python int must fall in to become a scalar of an integer dtype.
std::pair<int64_t, int64_t> int_range(DType dt) {
  if (dt == DType::Int32) return {INT32_MIN, INT32_MAX};
  return {INT64_MIN, INT64_MAX};
}

Tensor as_tensor(const py::handle& obj, const Tensor* like) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  Device device = like ? like->device() : cpu_device();
  if (py::isinstance<py::bool_>(obj)) {
    DType dt = like ? like->dtype() : DType::Bool;
    return scalar_tensor(obj.cast<bool>(), dt, device);
  }
  if (py::isinstance<py::int_>(obj)) {  // weak: takes the tensor's dtype (bool -> int64)
    DType dt = like && like->dtype() != DType::Bool ? like->dtype() : DType::Int64;
    if (is_floating(dt)) return scalar_tensor(float_arg(obj, "scalar"), dt, device);
    auto [lo, hi] = int_range(dt);
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow || v < lo || v > hi)  // NumPy 2 raises too rather than wrapping around
      throw overflow_error("Python integer " + py::repr(obj).cast<std::string>() + " is out of bounds for " +
                     dtype_name(dt));
    return scalar_tensor(static_cast<double>(v), dt, device);
  }
  if (py::isinstance<py::float_>(obj)) {  // weak: a float tensor's dtype, else the default float
    DType dt = like && is_floating(like->dtype()) ? like->dtype() : default_float_dtype();
    return scalar_tensor(obj.cast<double>(), dt, device);
  }
  if (py::isinstance<py::array>(obj)) return from_numpy(obj.cast<py::array>());
  return tensor_from_data(obj, std::nullopt, device);
}

std::pair<Tensor, Tensor> binary_operands(const py::handle& a, const py::handle& b) {
  if (!py::isinstance<Tensor>(a) && py::isinstance<Tensor>(b)) {
    auto [tb, ta] = binary_operands(b, a);
    return {ta, tb};
  }
  Tensor ta = as_tensor(a);
  if (py::isinstance<py::float_>(b) && !is_floating(ta.dtype())) ta = cast(ta, default_float_dtype());
  return {ta, as_tensor(b, &ta)};
}

}  // namespace fg::py_bind
