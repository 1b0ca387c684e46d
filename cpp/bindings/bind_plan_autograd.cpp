// fg.compile(model) under grad: a traced forward and backward as two plans that eager autograd
// runs as one node (flowgrad/plan/autograd_plan.h).
#include <optional>

#include "common.h"
#include "flowgrad/plan/autograd_plan.h"

namespace fg::py_bind {
namespace {

using Maybe = std::vector<std::optional<Tensor>>;

Maybe maybe(const Tensors& ts) {
  Maybe out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? std::optional<Tensor>(t) : std::nullopt);
  return out;
}

Tensors tensors(const Maybe& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.value_or(Tensor()));
  return out;
}

// (every parameter's identity and requires_grad, every module's training flag) of a module tree,
// depth first in definition order, as two byte strings a compiled model compares per call.
py::tuple compiled_model_state(const nn::Module& root) {
  std::string identity, training;
  std::vector<const nn::Module*> stack{&root};
  while (!stack.empty()) {
    const nn::Module* m = stack.back();
    stack.pop_back();
    training.push_back(m->training() ? '1' : '0');
    for (const auto& [name, p] : m->own_parameters()) {
      const uintptr_t id[2] = {reinterpret_cast<uintptr_t>(p.defined() ? p.impl() : nullptr),
                               p.defined() && requires_grad(p)};
      identity.append(reinterpret_cast<const char*>(id), sizeof id);
    }
    const auto& children = m->named_children();
    for (auto it = children.rbegin(); it != children.rend(); ++it)
      if (it->second) stack.push_back(it->second.get());
  }
  return py::make_tuple(py::bytes(identity), py::bytes(training));
}

}  // namespace

void bind_autograd_plan(py::module_& pm) {
  pm.def("module_state", &compiled_model_state, py::arg("module"),
         "(identity, training): bytes naming every parameter of the module tree (which tensor, whether it requires "
         "grad) and every module's training flag, depth first. fg.compile(model) compares them per call: a new "
         "identity (a parameter replaced or frozen) drops the plans, a new training flag picks another signature.");
  pm.def("trace_gradients", [](plan::Tracer& tracer, const Tensors& outputs, const Tensors& wrt) {
           auto [grad_outputs, grads] = plan::trace_gradients(tracer, outputs, wrt);
           return py::make_tuple(maybe(grad_outputs), maybe(grads));
         }, py::arg("tracer"), py::arg("outputs"), py::arg("wrt"),
         "Inside a trace, after the forward: marks where the backward starts, makes one shape-only gradient per "
         "output that is floating and requires grad (None for the others) and traces the gradients of `wrt` from "
         "them. Returns (output gradients, gradients of wrt: None where unused).");

  py::class_<plan::AutogradPlan, std::shared_ptr<plan::AutogradPlan>>(
      pm, "AutogradPlan",
      "A traced forward and backward cut into a forward plan (which also returns the tensors the backward reads) "
      "and a backward plan (output gradients and those tensors in, parameter and input gradients out); each "
      "forward run under grad records one autograd node holding the backward plan.")
      .def(py::init([](plan::Tracer& tracer, const Tensors& inputs, const Tensors& outputs, const Maybe& grad_outputs,
                       const Maybe& grads, const std::vector<std::pair<std::string, Tensor>>& names,
                       const Tensors& watch) {
             plan::AutogradSpec spec{inputs, outputs, tensors(grad_outputs), tensors(grads), names, watch};
             py::gil_scoped_release release;
             return std::make_shared<plan::AutogradPlan>(tracer, spec);
           }),
           py::arg("tracer"), py::arg("inputs"), py::arg("outputs"), py::arg("grad_outputs"), py::arg("grads"),
           py::arg("names"), py::arg("watch"),
           "Builds both plans from a finished trace whose backward trace_gradients traced: `grad_outputs` and "
           "`grads` are what it returned; watched tensors must keep their storage.")
      .def("run", [](plan::AutogradPlan& p, const Tensors& inputs, const Tensors& wrt) {
             py::gil_scoped_release release;
             return p.run(inputs, wrt);
           }, py::arg("inputs"), py::arg("wrt"),
           "Runs the forward plan; under grad mode the differentiable outputs come back attached to one node "
           "(grad_fn <CompiledBackward>) whose backward runs the backward plan into the gradients of `wrt` (the tensors "
           "traced as wrt: parameters, then the caller's inputs that require grad).")
      .def_property_readonly("forward", &plan::AutogradPlan::forward, "The forward plan.")
      .def_property_readonly("backward", &plan::AutogradPlan::backward,
                             "The backward plan, or None when no output is differentiable.")
      .def_property_readonly("saved", &plan::AutogradPlan::saved,
                             "How many tensors the forward plan hands the backward plan (activations, masks, inputs).")
      .def("up_to_date", &plan::AutogradPlan::up_to_date, "False once a watched tensor's storage was replaced.");
}

}  // namespace fg::py_bind
