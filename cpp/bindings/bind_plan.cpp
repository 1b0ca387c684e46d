// Compiled plans (fg.compile builds on these): the tracer as a context manager, and the plan.
#include <algorithm>
#include <optional>
#include <map>

#include "common.h"
#include "flowgrad/nn/module.h"  // set_module_names casts modules
#include "flowgrad/plan/capture.h"
#include "flowgrad/plan/plan.h"

namespace fg::py_bind {
namespace {

const char* kind_name(plan::BufferKind k) {
  switch (k) {
    case plan::BufferKind::Input: return "input";
    case plan::BufferKind::External: return "external";
    case plan::BufferKind::Arena: return "arena";
  }
  return "?";
}

py::list values(const plan::Plan& p, const std::vector<plan::Value>& vs) {
  py::list out;
  for (const plan::Value& v : vs) out.append(p.describe(v));
  return out;
}

py::list records(const plan::Plan& p, const std::vector<plan::Instruction>& code) {
  py::list out;
  for (const auto& ins : code) {
    py::dict d;
    d["op"] = plan::op_name(ins);
    d["inputs"] = values(p, ins.in);
    d["outputs"] = values(p, ins.out);
    d["shape"] = ins.out.empty() ? py::object(py::none()) : py::cast(std::vector<int64_t>(ins.out[0].shape.begin(), ins.out[0].shape.end()));
    d["dtype"] = ins.out.empty() ? py::object(py::none()) : py::cast(dtype_name(ins.out[0].dtype));
    d["attrs"] = ins.attrs.str();
    d["random"] = ins.op && ins.op->in(Group::Random);  // reads the "philox" pair
    d["run"] = ins.run < 0 ? py::object(py::none()) : py::cast(ins.run);  // its fused run
    py::list shapes;
    for (const auto& v : ins.in) shapes.append(std::vector<int64_t>(v.shape.begin(), v.shape.end()));
    d["input_shapes"] = shapes;
    d["branch"] = py::none();
    if (const auto& b = ins.branch) {  // a conditional region: decided at run time
      py::dict br;
      br["kind"] = plan::branch_kind_name(b->kind);
      br["id"] = b->id;
      br["label"] = b->label;
      br["conditional"] = b->conditional();  // the CUDA conditional node it maps to
      br["selector"] = b->selector.buffer >= 0 ? py::object(py::cast(p.describe(b->selector))) : py::object(py::none());
      br["max_iter"] = b->max_iter;
      br["guard"] = b->guard;
      br["runs"] = b->runs;  // per block: runs that took it (loops: iterations) since the plan was built
      py::list blocks;
      for (const auto& block : b->blocks) blocks.append(records(p, block));
      br["blocks"] = blocks;
      d["branch"] = br;
    }
    out.append(d);
  }
  return out;
}

// A trace mode that runs every kernel and notes each op's name (testing aid: the op stream eager
// code runs, to hold against a plan's).
class OpLog : public OpObserver {
 public:
  void on_op(const OpDef& op, TensorList, const Tensors&, const Attrs&) override { ops.emplace_back(op.name); }
  std::vector<std::string> ops;
  std::optional<ModeGuard> guard;
};

}  // namespace

// bind_plan_explain.cpp
std::string user_line(const std::string& skip);
py::list explain(const plan::Plan& p);
void bind_autograd_plan(py::module_& pm);  // bind_plan_autograd.cpp

void bind_plan(py::module_& m) {
  auto pm = m.def_submodule("plan", "Compiled plans: tracer, instructions, memory plan, executor (used by fg.compile).");
  py::class_<plan::Tracer>(pm, "Tracer", "Records every op call of this thread while alive (use as a context manager), tracing shapes only: "
                                  "values computed from anything but constants made during the trace are shape-only "
                                  "tensors (no kernel runs, no in-place write is made; reading their values raises).")
      .def(py::init<>())
      .def("__enter__", [](plan::Tracer& t) -> plan::Tracer& { return t; }, py::return_value_policy::reference)
      .def("__exit__", [](plan::Tracer& t, py::args) { t.stop(); return false; })
      .def("mark_backward", [](plan::Tracer& t) { t.backward_start = t.calls.size(); },
           "Marks where the backward pass starts (common-subexpression elimination keeps recomputation there).")
      .def("mark_update", [](plan::Tracer& t) { t.update_start = t.calls.size(); },
           "Marks where the optimizer's update starts (explain() shows the phase).")
      .def("begin_update_scope", [](plan::Tracer& t) { t.update_scopes.emplace_back(t.calls.size(), SIZE_MAX); },
           "Starts the calls of one parameter's update: a guard runs all of them or none (when only a branch "
           "computes the gradient they read).")
      .def("end_update_scope", [](plan::Tracer& t) {
             FG_CHECK(!t.update_scopes.empty() && t.update_scopes.back().second == SIZE_MAX, Value,
                      "end_update_scope: no update scope is open");
             t.update_scopes.back().second = t.calls.size();
           }, "Ends the update scope begin_update_scope started.")
      .def("locate_sources", [](plan::Tracer& t, const std::string& skip) { t.locate = [skip] { return user_line(skip); }; },
           py::arg("skip"), "Records the source line ('file.py:12') of each op call: the innermost Python frame whose "
           "file does not start with `skip` (flowgrad's own files).")
      .def("profile", [](plan::Tracer& t, const py::args&) { t.note_source(); },
           "A sys.setprofile hook: notes the caller's source line before every call (ops that release the "
           "interpreter cannot read it themselves).")
      .def("set_module_names", [](plan::Tracer& t, const std::vector<std::pair<py::object, std::string>>& names) {
             for (const auto& [module, name] : names) t.module_names[&module.cast<const nn::Module&>()] = name;
           }, py::arg("names"), "(module, label) pairs: the label explain() shows for ops a module's call runs.")
      .def_property_readonly("calls", [](const plan::Tracer& t) { return t.calls.size(); }, "Number of recorded op calls.")
      .def_property_readonly("branches", [](const plan::Tracer& t) {
             return std::count_if(t.calls.begin(), t.calls.end(), [](const plan::TracedCall& c) { return c.branch != nullptr; });
           }, "Number of switch / while_ / until branches recorded so far (outermost ones).");

  py::class_<plan::Plan, std::shared_ptr<plan::Plan>>(pm, "Plan", "A traced step as instructions over planned memory.")
      .def(py::init([](plan::Tracer& tracer, const Tensors& inputs, const Tensors& outputs,
                       const std::vector<std::pair<Tensor, Tensor>>& grads,
                       const std::vector<std::pair<std::string, Tensor>>& names, const Tensors& watch,
                       const std::vector<std::optional<Tensor>>& grad_targets) {
             Tensors targets;
             for (const auto& t : grad_targets) targets.push_back(t.value_or(Tensor()));
             py::gil_scoped_release release;
             return std::make_shared<plan::Plan>(tracer, plan::PlanSpec{inputs, outputs, grads, names, watch, targets});
           }),
           py::arg("tracer"), py::arg("inputs"), py::arg("outputs"), py::arg("grads"), py::arg("names"), py::arg("watch"),
           py::arg("grad_targets") = std::vector<std::optional<Tensor>>{},
           "Builds a plan from a finished trace: inputs are copied into slots each run, outputs returned, each "
           "(parameter, gradient) pair bound to the parameter's .grad; watched tensors must keep their storage. "
           "grad_targets (optional, one per pair): the tensors to write the gradients into, e.g. another plan's "
           "(a fresh one where an entry is None or does not fit the parameter).")
      .def("run", [](plan::Plan& p, const Tensors& inputs) {
             py::gil_scoped_release release;
             return p.run(inputs);
           }, py::arg("inputs"), "Runs the plan on new inputs; returns fresh output tensors.")
      .def("run_profiled", [](plan::Plan& p, const Tensors& inputs) {
             std::vector<double> ms;
             Tensors out;
             {
               py::gil_scoped_release release;
               out = p.run_profiled(inputs, &ms);
             }
             return py::make_tuple(out, ms);
           }, py::arg("inputs"),
           "Runs the plan once like run() and also returns each instruction's milliseconds (CPU: host clock; "
           "CUDA: timing events inside a captured graph of the step).")
      .def("arena", [](const plan::Plan& p) {
             const auto& arena = p.arena();
             return plan::layout(arena, {0, 0, Dims{static_cast<int64_t>(arena->bytes())}, Dims{1}, DType::UInt8});
           }, "The memory the plan's intermediates and input slots live in, as a 1-D uint8 tensor over all of it.")
      .def("bind_arena", [](plan::Plan& p, const Tensor& arena) {
             FG_CHECK(arena.dtype() == DType::UInt8 && arena.ndim() == 1 && arena.is_contiguous() && arena.offset() == 0 &&
                          static_cast<size_t>(arena.numel()) == arena.storage()->bytes(), Value,
                      "Plan.bind_arena: expected a whole 1-D uint8 storage (e.g. another plan's arena()), got ",
                      describe(arena));
             py::gil_scoped_release release;
             p.bind_arena(arena.storage());
           }, py::arg("arena"),
           "Moves the plan's intermediates onto `arena` (a 1-D uint8 tensor over a whole storage on the plan's "
           "device, at least stats()['arena_bytes'] bytes), e.g. another plan's arena(): plans that never run at "
           "the same time can share one. A captured CUDA graph is taken again on a later call.")
      .def("up_to_date", &plan::Plan::up_to_date, "False once a watched tensor's storage was replaced.")
      .def("check_step", [](plan::Plan& p, const Tensors& inputs, const py::object& after) {
             std::function<void()> fn;
             if (!after.is_none()) fn = [after] { after(); };
             return p.check_step(inputs, fn);
           }, py::arg("inputs"), py::arg("after") = py::none(),
           "The capture self-check's comparison on any device: runs one step plainly, then again from the same "
           "state (parameters, optimizer state, gradients, random counters) followed by after() (a side effect "
           "to plant a difference), and compares what both leave. Returns '' when they agree, else the first "
           "buffer that differs and the instruction that wrote it. Applies exactly one step either way.")
      .def("capture_blocker", [](const plan::Plan& p, const py::object& device) {
             return plan::capture_blocker(p.executable(), device_arg(device, p.device()));
           }, py::arg("device") = py::none(),
           "Why the plan would not be captured into a CUDA graph on `device` (default: its own), decided on the "
           "host before any attempt; '' when capture would be tried.")
      .def("share_arena", [](plan::Plan& p, plan::Plan& other) {
             py::gil_scoped_release release;
             plan::share_arena(p, other);
           }, py::arg("other"),
           "Binds this plan and `other` (same device) onto one arena, the larger of theirs, so that their "
           "intermediates share memory; the two must never run at the same time.")
      .def("arena_shared_with", [](const plan::Plan& p, const plan::Plan& other) { return p.arena() == other.arena(); },
           py::arg("other"), "True when this plan and `other` use the same arena storage.")
      .def("check_memory", &plan::Plan::check_memory,
           "Raises unless no two buffers alive at the same time share arena bytes.")
      .def("__str__", &plan::Plan::str)
      .def("dot", &plan::Plan::dot, "The plan as a Graphviz DOT graph.")
      .def_property_readonly("device", [](const plan::Plan& p) { return p.device().str(); }, "The plan's device.")
      .def("stats", [](const plan::Plan& p) { return p.stats().to_map(); },
           "Counts and sizes: instructions, kernels, fused, arena_bytes, naive_bytes, cuda_graph, host_syncs, "
           "philox_writes (runs before which the host wrote the random counters' {seed, base} pair), inputs_copied (inputs the last run copied into the arena; a CPU plan reads the others where the caller keeps them), ...")
      .def("ir", [](const plan::Plan& p) { return records(p, p.instructions()); },
           "The instructions as a list of records (op, inputs, outputs, shape, dtype, attrs, random, run, "
           "input_shapes, branch); a branch instruction's 'branch' holds its kind, the CUDA conditional node it "
           "maps to, its selector and its blocks (lists of records).")
      .def("explain", &explain,
           "One record per instruction: instruction, op, phase (forward, backward, optimizer), module (dotted path "
           "or FlowBuilder node with its tag), source ('file.py:12'), run (fused run or -1), buffer (of its first "
           "output), bytes and offset (arena bytes of its outputs and the first one's offset; None outside the arena).")
      .def("passes", &plan::Plan::passes,
           "What each pass did: (pass, instructions before, after); for 'fusion', kernels after.")
      .def("pass_ms", &plan::Plan::pass_ms,
           "Milliseconds each stage of the plan's build took: (stage, ms) for every pass of passes(), then "
           "'memory' (arena planning and its check) and 'bind'.")
      .def("fused_cuda_source", [](const plan::Plan& p, int run) {
             FG_CHECK(run >= 0 && run < static_cast<int>(p.runs().size()), Index, "fused_cuda_source: run ", run,
                      " of a plan with ", p.runs().size(), " fused run(s)");
             plan::FusedKernel k = p.fused_kernel(run, "fg_fused_" + std::to_string(run));
             return py::make_tuple(k.name, k.source);
           }, py::arg("run"), "(name, source) of the CUDA kernel generated for fused run `run` (CUDA plans compile it with NVRTC).")
      .def("buffers", [](const plan::Plan& p) {
             py::list out;
             for (const auto& b : p.buffers()) {
               py::dict d;
               d["name"] = b.name;
               d["kind"] = kind_name(b.kind);
               d["local"] = b.local;  // kept in a fused run's tile scratch, not in the arena
               d["bytes"] = b.bytes;
               d["offset"] = b.offset;
               d["first"] = b.first;
               d["last"] = b.last;
               d["takes"] = b.takes >= 0 ? py::object(py::str(p.buffers()[b.takes].name)) : py::object(py::none());
               out.append(d);
             }
             return out;
           }, "Every buffer with its kind, bytes, arena offset, lifetime [first, last] in instructions, whether it "
              "is local to a fused run, and `takes`: the name of the buffer whose bytes it is written over (an "
              "operand that dies at the instruction making it, which then reads each value before writing its "
              "place), or None.");

  bind_autograd_plan(pm);
  pm.def("nvrtc_available", [] {
    std::string why;
    bool ok = plan::nvrtc_available(&why);
    return py::make_tuple(ok, why);
  }, "(True, '') when NVRTC can compile fused CUDA kernels here, else (False, why).");
  pm.def("compile_ptx", [](const std::string& source, const std::string& name, int arch) {
    py::gil_scoped_release release;
    return plan::compile_ptx(source, name, arch);
  }, py::arg("source"), py::arg("name"), py::arg("arch"), "PTX of CUDA source compiled by NVRTC for compute_<arch>.");
  pm.def("nvrtc_archs", &plan::nvrtc_archs, "The GPU architectures (80, 90, ...) NVRTC can compile SASS for.");
  pm.def("compile_fused", [](const std::string& source, const std::string& name, int arch) {
    plan::FusedBinary binary;
    {
      py::gil_scoped_release release;
      binary = plan::compile_fused(source, name, arch);
    }
    return py::make_tuple(binary.target, py::bytes(binary.image));
  }, py::arg("source"), py::arg("name"), py::arg("arch"),
  "(target, image): what compiled plans load for a GPU of architecture `arch`: a CUBIN for sm_<arch> when NVRTC "
  "knows it, else PTX for the newest architecture it knows below `arch`. `target` says which.");
  pm.def("set_fused_fault", [](const std::string& stage) {
    static const std::map<std::string, plan::FusedFault> stages = {
        {"none", plan::FusedFault::None}, {"load", plan::FusedFault::Load}, {"launch", plan::FusedFault::Launch},
        {"legacy_stream", plan::FusedFault::LegacyStream}, {"drop_in_capture", plan::FusedFault::DropInCapture}};
    auto it = stages.find(stage);
    FG_CHECK(it != stages.end(), Value, "set_fused_fault: stage must be 'none', 'load', 'launch', 'legacy_stream' or "
             "'drop_in_capture', got '", stage, "'");
    plan::set_fused_fault(it->second);
  }, py::arg("stage"),
  "Testing aid: make the driver reject every fused CUDA kernel from now on, at 'load' (an image that is no module) or "
  "'launch' (a grid of 0 blocks), to exercise the fallback to unfused launches; or launch them on the legacy "
  "default stream ('legacy_stream', the bug the capture self-check catches), or drop them silently while a graph is "
  "captured ('drop_in_capture': neither run nor counted, caught only because the self-check poisons the arena); "
  "'none' restores.");
  pm.def("inputs_for_trace", &plan::inputs_for_trace, py::arg("inputs"), py::arg("held"),
         "The example inputs as fg.compile traces them: each that does not start its storage contiguously, or "
         "shares storage with `held` (parameters, buffers, optimizer state) or an earlier input, replaced by a "
         "copy of its own (requires_grad kept); the others as they are.");
  pm.def("shape_only", [](const std::vector<int64_t>& shape, DType dtype, const Device& device) {
    return Tensor::shape_only(Dims(shape), dtype, device);
  }, py::arg("shape"), py::arg("dtype"), py::arg("device"),
         "A contiguous tensor of this shape whose storage holds no bytes (reading or writing its values raises "
         "outside a trace): a plan can be built over it, for its statistics, without the memory (fg.generate's "
         "dry_run plans over a KV cache made of them).");
  py::class_<OpLog>(pm, "OpLog", "Testing aid: as a context manager, notes the name of every op this thread runs "
                                 "(eagerly, kernels and all) in `ops`.")
      .def(py::init<>())
      .def("__enter__", [](OpLog& log) -> OpLog& { log.guard.emplace(&log); return log; },
           py::return_value_policy::reference)
      .def("__exit__", [](OpLog& log, py::args) { log.guard.reset(); return false; })
      .def_readonly("ops", &OpLog::ops, "The ops run inside the block, in order.");
  pm.def("kernel_calls", &kernel_calls,
         "How many kernels eager dispatch has called in this process (testing aid: compiling calls none for "
         "values computed from the step's inputs, it traces shapes only).");
}

}  // namespace fg::py_bind
