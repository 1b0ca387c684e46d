// Mixed precision: autocast state, GradScaler helpers, and the test hook for the float64 math
// that makes Philox normals identical on the CPU and CUDA.
#include <string>

#include "common.h"
#include "flowgrad/ops/autocast.h"
#include "kernels/common/exact_math.h"

namespace fg::py_bind {

namespace {

DeviceType autocast_device(const std::string& device_type) {
  FG_CHECK(device_type == "cpu" || device_type == "cuda", Value,
           "autocast: device_type must be 'cpu' or 'cuda', got '", device_type, "'");
  return device_type == "cpu" ? DeviceType::CPU : DeviceType::CUDA;
}

}  // namespace

void bind_mixed(py::module_& m) {
  // The thread's autocast state per device type; fg.autocast (amp.py) is the public interface.
  m.def("_set_autocast", [](const std::string& device_type, bool enabled, DType dtype) {
    set_autocast_state(autocast_device(device_type), {enabled, dtype});
  });
  m.def("_autocast_state", [](const std::string& device_type) {
    AutocastState s = autocast_state(autocast_device(device_type));
    return py::make_tuple(s.enabled, s.dtype);
  });
  // Test hook: exact_log / exact_sincos over a float64 array (tests compare them with libm).
  m.def("_exact_math", [](const std::string& fn, py::array_t<double, py::array::c_style | py::array::forcecast> x) {
    py::array_t<double> out(x.size());
    const double* in = x.data();
    double* o = out.mutable_data();
    for (py::ssize_t i = 0; i < x.size(); ++i) {
      if (fn == "log") o[i] = exact_log(in[i]);
      else if (fn == "sin") o[i] = exact_sincos(in[i]).sin;
      else if (fn == "cos") o[i] = exact_sincos(in[i]).cos;
      else throw py::value_error("_exact_math: fn must be 'log', 'sin' or 'cos'");
    }
    return out;
  });
}

}  // namespace fg::py_bind
