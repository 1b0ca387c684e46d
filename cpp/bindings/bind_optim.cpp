// Optimizer steps for fg.optim (the Python classes keep param_groups, state tensors and the
// hyper-parameter tensors they write before each step).
#include "common.h"
#include "flowgrad/optim/optim.h"

namespace fg::py_bind {

void bind_optim(py::module_& m) {
  auto optim = m.def_submodule("optim", "Fused optimizer update ops over parameter groups (used by fg.optim).");
  auto names = [](std::span<const char* const> slots) {
    py::tuple t(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) t[i] = py::str(slots[i]);
    return t;
  };
  optim.attr("SGD_SLOTS") = names(optim::sgd_slots());
  optim.attr("ADAM_SLOTS") = names(optim::adam_slots());
  auto mode = [](bool foreach) { return foreach ? optim::UpdateMode::MultiTensor : optim::UpdateMode::PerParameter; };
  optim.def("sgd_step", [mode](const Tensors& params, const Tensors& bufs, const Tensor& hyper, bool foreach) {
    py::gil_scoped_release release;
    optim::sgd_step(params, bufs, hyper, mode(foreach));
  }, py::arg("params"), py::arg("momentum_buffers"), py::arg("hyper"), py::arg("foreach") = true,
     "One SGD step over a group (parameters with a gradient); momentum_buffers is empty without momentum; "
     "hyper holds SGD_SLOTS as float64. foreach: multi-tensor update ops when the parameters share a device "
     "and dtype (few launches, the same numbers), else one sgd_update op per parameter.");
  optim.def("adam_step", [mode](const Tensors& params, const Tensors& m1, const Tensors& m2, const Tensors& steps,
                                const Tensor& hyper, bool foreach) {
    py::gil_scoped_release release;
    optim::adam_step(params, m1, m2, steps, hyper, mode(foreach));
  }, py::arg("params"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("steps"), py::arg("hyper"),
     py::arg("foreach") = true,
     "One Adam/AdamW step over a group, in place (parameters with a gradient); hyper holds ADAM_SLOTS as "
     "float64. foreach: multi-tensor update ops when the parameters share a device and dtype, else one "
     "adam_update op per parameter.");
  optim.def("write_hyper", &optim::write_hyper, py::arg("hyper"), py::arg("values"),
            "Writes host values into a hyper-parameter tensor on any device.");
  optim.def("clip_grad_norm", &optim::clip_grad_norm, py::arg("params"), py::arg("max_norm"),
            "Scales gradients to a global L2 norm of at most max_norm with device ops (no host read); returns "
            "the norm before as a 0-d float32 tensor.");
}

}  // namespace fg::py_bind
