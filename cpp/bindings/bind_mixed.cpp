// Mixed precision: autocast state, GradScaler helpers, and the test hook for the float64 math
// that makes Philox normals identical on the CPU and CUDA.
#include <string>

#include "common.h"
#include "kernels/common/exact_math.h"

namespace fg::py_bind {

void bind_mixed(py::module_& m) {
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
