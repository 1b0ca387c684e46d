// Optimizer kernels for fg.optim (the Python classes keep param_groups and state tensors).
#include "common.h"
#include "flowgrad/optim/optim.h"

namespace fg::py_bind {

void bind_optim(py::module_& m) {
  auto optim = m.def_submodule("optim", "Fused multi-tensor optimizer steps (used by fg.optim).");
  optim.def("sgd_step", [](const Tensors& params, const std::vector<std::optional<Tensor>>& bufs, double lr,
                           double momentum, double dampening, double weight_decay, bool nesterov) {
    Tensors b;
    for (const auto& t : bufs) b.push_back(t.value_or(Tensor()));
    SgdHyper h{lr, momentum, dampening, weight_decay, nesterov};
    Tensors out;
    {
      py::gil_scoped_release release;
      out = optim::sgd_step(params, b, h);
    }
    py::list result;
    for (const Tensor& t : out) result.append(t.defined() ? py::cast(t) : py::none());
    return result;
  }, py::arg("params"), py::arg("momentum_buffers"), py::arg("lr"), py::arg("momentum"), py::arg("dampening"),
     py::arg("weight_decay"), py::arg("nesterov"), "One SGD step over a group; returns the momentum buffers.");
  optim.def("adam_step", [](const Tensors& params, const Tensors& m1, const Tensors& m2, const Tensors& steps,
                            double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled) {
    AdamHyper h{lr, beta1, beta2, eps, weight_decay, decoupled};
    py::gil_scoped_release release;
    optim::adam_step(params, m1, m2, steps, h);
  }, py::arg("params"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("steps"), py::arg("lr"),
     py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decoupled"),
     "One Adam/AdamW step over a group, in place.");
  optim.def("clip_grad_norm", &optim::clip_grad_norm, py::arg("params"), py::arg("max_norm"),
            "Scales gradients to a global L2 norm of at most max_norm; returns the norm before.");
}

}  // namespace fg::py_bind
