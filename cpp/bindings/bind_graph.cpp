// fg.FlowBuilder, fg.Graph (a Module) and the fg.flow built-in modules.
#include <pybind11/functional.h>

#include "common.h"
#include "flowgrad/graph/builder.h"
#include "flowgrad/graph/builtins.h"

namespace fg::py_bind {
namespace {

using graph::FlowBuilder;
using graph::Graph;
using graph::ModulePtr;
using observe::Observer;

std::vector<std::string> strings(const py::args& args, const char* what) {
  std::vector<std::string> out;
  for (py::handle h : args) {
    FG_CHECK(py::isinstance<py::str>(h), Value, what, ": tags must be strings, got ",
             std::string(py::str(py::type::of(h).attr("__name__"))));
    out.push_back(h.cast<std::string>());
  }
  return out;
}

ModulePtr module_arg(const py::handle& h, const char* what, size_t position) {
  FG_CHECK(py::isinstance<nn::Module>(h), Value, what, ": argument ", position, " is a ",
           std::string(py::str(py::type::of(h).attr("__name__"))), ", expected a fg.nn.Module");
  auto m = h.cast<ModulePtr>();
  sync_type_names(*m);
  return m;
}

std::vector<ModulePtr> modules_arg(const py::args& args, const char* what, size_t first_position) {
  std::vector<ModulePtr> out;
  for (size_t i = 0; i < args.size(); ++i) out.push_back(module_arg(args[i], what, first_position + i));
  return out;
}

py::dict flushed_dict(const std::vector<std::pair<std::string, double>>& values) {
  py::dict out;
  for (const auto& [tag, v] : values) out[py::str(tag)] = v;
  return out;
}

py::dict profile_dict(const Graph& g, const graph::Profile& p) {
  py::list nodes;
  for (size_t id = 0; id < g.nodes().size(); ++id) {
    const graph::Node& n = g.nodes()[id];
    if (n.kind == graph::NodeKind::Input) continue;
    py::dict d;
    d["node"] = id;
    d["tag"] = n.tag.empty() ? py::object(py::none()) : py::object(py::str(n.tag));
    d["label"] = n.label();
    d["level"] = n.level;
    d["seconds"] = id < p.node_seconds.size() ? p.node_seconds[id] : 0.0;
    nodes.append(d);
  }
  py::dict out;
  out["total"] = p.total;
  out["levels"] = py::cast(std::vector<double>(p.level_seconds.begin() + (p.level_seconds.empty() ? 0 : 1),
                                               p.level_seconds.end()));
  out["parallelism"] = p.parallelism();
  out["nodes"] = nodes;
  return out;
}

void write_text(const py::object& path, const std::string& text) {
  py::module_::import("pathlib").attr("Path")(path).attr("write_text")(text, "utf-8");
}

observe::TrendGroup trend_group(const Observer& obs, const std::vector<std::string>& tags) {
  std::vector<observe::Trend> trends;
  for (const std::string& t : tags.empty() ? obs.tags() : tags) trends.push_back(obs.trend(t));
  return observe::TrendGroup(std::move(trends));
}

observe::Trend single_trend(const Graph& g, const Observer& obs, const std::string& tag, const char* what) {
  FG_CHECK(g.group(tag).empty(), Graph, what, "('", tag, "'): '", tag, "' is a tag group; use ", what,
           "s('", tag, "') for its trends");
  g.observed({tag}, obs, what);
  return obs.trend(tag);
}

py::dict observation_state(const Observer& obs) {
  py::dict series;
  for (const auto& [tag, s] : obs.series()) {
    py::dict d;
    d["epochs"] = s.epochs;
    d["values"] = s.values;
    series[py::str(tag)] = d;
  }
  py::dict out;
  out["flush_seconds"] = obs.flush_seconds();
  out["series"] = series;
  return out;
}

void restore_observation(Observer& obs, const py::dict& state) {
  obs.reset({});
  for (auto [tag, d] : state["series"].cast<py::dict>())
    obs.restore(tag.cast<std::string>(), d["epochs"].cast<std::vector<int64_t>>(), d["values"].cast<std::vector<double>>());
  obs.restore_times(state["flush_seconds"].cast<std::vector<double>>());
}

void bind_builder(py::module_& m) {
  auto rit = py::return_value_policy::reference_internal;
  py::class_<FlowBuilder>(m, "FlowBuilder",
      "Builds a Graph as data flow: FlowBuilder(encoder).through(block).tag('h')...build(). "
      "fg.flow(module) is the same; FlowBuilder() starts from the graph input itself.")
      .def(py::init([](const py::object& first) {
        return std::make_unique<FlowBuilder>(first.is_none() ? nullptr : module_arg(first, "FlowBuilder", 0));
      }), py::arg("module") = py::none())
      .def("through", [](FlowBuilder& b, const py::object& mod) -> FlowBuilder& {
        return b.through(module_arg(mod, "through", 0));
      }, py::arg("module"), rit, "Passes the stream through a module.")
      .def("tag", &FlowBuilder::tag, py::arg("name"), rit,
           "Names the last node's output: for using(), observation (collect/trend) and sub().")
      .def("tag_group", &FlowBuilder::tag_group, py::arg("name"), rit,
           "Tags the branches of an open split name_0, name_1, ...; trends(name) expands to them.")
      .def("using", [](FlowBuilder& b, py::args tags) -> FlowBuilder& { return b.using_(strings(tags, "using")); },
           rit, "Feeds tagged values to the last node's module as extra positional inputs. A tag defined "
                "later becomes recurrent state (zeros on the first call).")
      .def("split", [](FlowBuilder& b, py::args branches) -> FlowBuilder& {
        return b.split(modules_arg(branches, "split", 0));
      }, rit, "Runs the stream through several branches (concurrently where they are independent).")
      .def("merge", [](FlowBuilder& b, const py::object& mod) -> FlowBuilder& {
        return b.merge(module_arg(mod, "merge", 0));
      }, py::arg("module"), rit, "Joins the open split's branches: module(*branch_outputs).")
      .def("also", [](FlowBuilder& b, const py::object& mod) -> FlowBuilder& {
        return b.also(module_arg(mod, "also", 0));
      }, py::arg("module"), rit, "Residual: out = x + module(x).")
      .def("gate", [](FlowBuilder& b, const py::object& router, py::args experts) -> FlowBuilder& {
        return b.gate(module_arg(router, "gate", 0), modules_arg(experts, "gate", 1));
      }, py::arg("router"), rit,
         "Soft routing: router(x) gives weights [..., n]; out = sum_i w[..., i] * expert_i(x).")
      .def("switch", [](FlowBuilder& b, const py::object& selector, py::args branches) -> FlowBuilder& {
        return b.switch_(module_arg(selector, "switch", 0), modules_arg(branches, "switch", 1));
      }, py::arg("selector"), rit,
         "Hard routing: selector(x) gives a branch index; only that branch runs (and gets gradients).")
      .def("loop", [](FlowBuilder& b, const py::object& body) -> FlowBuilder& {
        return b.loop(module_arg(body, "loop", 0));
      }, py::arg("body"), rit, "Repeats body; finish with .for_(n), .while_(halt, max_iter) or .until(halt, max_iter).")
      .def("for_", &FlowBuilder::for_, py::arg("n"), rit, "Runs the loop body n times.")
      .def("while_", [](FlowBuilder& b, const py::object& halt, int64_t max_iter) -> FlowBuilder& {
        return b.while_(module_arg(halt, "while_", 0), max_iter);
      }, py::arg("halt"), py::arg("max_iter"), rit,
         "Runs the body while halt(x) <= 0, checked before each iteration (may run zero times).")
      .def("until", [](FlowBuilder& b, const py::object& halt, int64_t max_iter) -> FlowBuilder& {
        return b.until(module_arg(halt, "until", 0), max_iter);
      }, py::arg("halt"), py::arg("max_iter"), rit,
         "Runs the body until halt(x) > 0, checked after each iteration (runs at least once).")
      .def("map", [](FlowBuilder& b, const py::object& body) -> FlowBuilder& {
        return b.map(module_arg(body, "map", 0));
      }, py::arg("body"), rit, "Applies body per element; finish with [.batched()] .each(), .over(tag) or .slices(n).")
      .def("batched", &FlowBuilder::batched, rit, "Calls the map body once on all elements at once.")
      .def("each", &FlowBuilder::each, rit, "Maps over dim 0 of the stream and stacks the results.")
      .def("over", &FlowBuilder::over, py::arg("tag"), rit, "Maps over dim 0 of a tagged value instead of the stream.")
      .def("slices", &FlowBuilder::slices, py::arg("n"), rit,
           "Splits the last dim into n equal slices, maps each, concatenates the results.")
      .def("input", &FlowBuilder::input, py::arg("name"), rit,
           "Declares an extra graph input (passed after x, in declaration order), usable with using(name).")
      .def("build", &FlowBuilder::build, "Validates the flow and returns the Graph (GraphError names the problem).");
}

void bind_graph_class(py::module_& m) {
  py::class_<Graph, nn::Module, py::smart_holder> g(m, "Graph",
      "A built flow: a Module whose tagged values can be observed, trended, profiled and drawn; it pickles and deep-copies.");
  g.def("forward", [](Graph& self, py::args args, std::optional<double> timeout) {
    return result_of(self.forward_with_timeout(tensors_of(args, "Graph.forward"), timeout));
  }, py::kw_only(), py::arg("timeout") = py::none(),
     "Runs the graph on (x, *extra inputs). timeout: seconds, checked between levels and loop iterations "
     "(TimeoutError).")
      .def_property_readonly("tags", &Graph::tags, "The node tags, in flow order.")
      .def_property_readonly("input_names", &Graph::input_names, "The graph inputs: 'input' then each input(name).")
      .def_property_readonly("levels", [](const Graph& self) {
        return std::vector<std::vector<int>>(self.levels().begin() + 1, self.levels().end());
      }, "Node indices per topological level; nodes of one level may run concurrently.")
      .def_property("parallel", &Graph::parallel, &Graph::set_parallel,
                    "Run independent nodes of a level concurrently on the CPU pool (default True).")
      .def("tagged", &Graph::tagged, py::arg("tag"), "The tagged value of the last forward (detached).")
      .def("set_tagged", &Graph::set_tagged, py::arg("tag"), py::arg("value"),
           "Replaces a tagged value of the last forward: collect and tagged then see it (fg.compile's steps "
           "deliver their tagged values this way).")
      .def("sub", &Graph::sub, py::arg("tag"), "The module of the tagged node (a nested Graph stays observable).")
      .def("traces", &Graph::traces, py::arg("tag"), "Per-iteration outputs of the tagged loop in the last forward.")
      .def("tag_group", &Graph::group, py::arg("name"), "The tags of a tag group (empty when no such group).")
      .def("_observed", [](Graph& self, const std::string& what, py::args tags) {
        return self.observed(strings(tags, what.c_str()), what == "plot_timings_html" ? self.timings() : self.observer(),
                             what.c_str());
      }, "Tags (groups expanded) checked to be graph tags or recorded; GraphError naming `what` otherwise.")
      .def("_expand", [](const Graph& self, py::args tags) { return self.expand(strings(tags, "expand")); },
           "Tags with every tag group replaced by its members.")
      .def("parameters_by_tag", [](const Graph& self, const std::string& tag) {
        py::list out;
        for (const auto& [name, p] : self.parameters_by_tag(tag)) out.append(p);
        return out;
      }, py::arg("tag"), "The parameters of the tagged node (or of every tag of a group).")
      .def("freeze", [](Graph& self, py::args tags) { self.freeze(strings(tags, "freeze")); },
           "Stops gradients to the tagged nodes' parameters (no tags: all); optimizers then leave them unchanged.")
      .def("unfreeze", [](Graph& self, py::args tags) { self.unfreeze(strings(tags, "unfreeze")); },
           "Undoes freeze for the tagged nodes (no tags: all).")
      .def("zero_frozen_grads", &Graph::zero_frozen_grads, "Drops any gradient held by frozen parameters.")
      .def("detach_state", &Graph::detach_state,
           "Cuts the recurrent state from the autograd graph of earlier calls (truncated BPTT).")
      .def("reset_state", &Graph::reset_state, "Clears recurrent state: the next call starts from zeros.")
      // observation
      .def("log", [](Graph& self, py::args tags, int64_t total_epochs, int64_t every) {
        self.log(strings(tags, "log"), total_epochs, every);
      }, py::kw_only(), py::arg("total_epochs") = 0, py::arg("every") = 0,
         "After each flush, prints (or passes to on_log callbacks) a line with these tags' epoch values; "
         "every=N also gives a progress line every N steps (collect/record calls) with the running means.")
      .def("on_log", &Graph::on_log, py::arg("fn"), "fn(line) receives each log line instead of print.")
      .def("collect", [](Graph& self, py::args tags) { self.collect(strings(tags, "collect")); },
           "Adds the last forward's tagged values (their means) to the batch buffers; stays in C++.")
      .def("record", [](Graph& self, const std::string& tag, py::args values) {
        std::vector<Graph::Recorded> recorded;
        for (py::handle v : values) {
          if (py::isinstance<Tensor>(v)) recorded.emplace_back(v.cast<Tensor>());
          else if (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)) recorded.emplace_back(v.cast<double>());
          else recorded.emplace_back(as_tensor(v));
        }
        self.record(tag, recorded);
      }, py::arg("tag"), "Adds values (numbers or tensors, by their mean) to a tag's batch buffer.")
      .def("collected", [](Graph& self, const std::string& tag) {
        self.observed({tag}, self.observer(), "collected");
        return self.observer().collected(tag);
      },
           py::arg("tag"), "The values collected for tag since the last flush.")
      .def("flush", [](Graph& self, py::args tags, const std::string& reduce) {
        FG_CHECK(reduce == "none" || reduce == "mean", Value, "flush: reduce must be 'none' or 'mean', got '", reduce, "'");
        return flushed_dict(self.flush(strings(tags, "flush"),
                                       reduce == "mean" ? observe::Reduce::MeanOverRanks : observe::Reduce::None));
      }, py::kw_only(), py::arg("reduce") = "none",
         "Ends an epoch: each tag's batch mean joins its history; returns {tag: mean}. "
         "reduce='mean' averages over the ranks of fg.distributed (every rank must flush the same tags).")
      .def("on_flush", [](Graph& self, std::function<void(py::dict)> fn) {
        self.observer().on_flush([fn](const std::vector<std::pair<std::string, double>>& v) {
          py::gil_scoped_acquire gil;
          fn(flushed_dict(v));
        });
      }, py::arg("fn"), "fn({tag: mean}) runs after each flush.")
      .def("trend", [](Graph& self, const std::string& tag) { return single_trend(self, self.observer(), tag, "trend"); },
           py::arg("tag"), "The tag's per-epoch history as a Trend.")
      .def("trends", [](Graph& self, py::args tags) {
        return trend_group(self.observer(), self.observed(strings(tags, "trends"), self.observer(), "trends"));
      }, "Trends of several tags (tag groups expand; none: every observed tag).")
      .def("reset_trend", [](Graph& self, py::args tags) {
        self.observer().reset(self.observed(strings(tags, "reset_trend"), self.observer(), "reset_trend"));
      }, "Forgets the history of tags (none: everything, flush count and clock included).")
      .def_property_readonly("flush_count", [](Graph& self) { return self.observer().flush_count(); },
                             "How many times flush ran.")
      .def("elapsed", [](Graph& self) { return self.observer().elapsed(); },
           "Seconds since the first forward, collect, record or flush.")
      .def("eta", [](Graph& self, int64_t total) { return self.observer().eta(total); }, py::arg("total_epochs"),
           "Estimated seconds left: mean epoch time times the epochs still to run.")
      .def("last_flush_duration", [](Graph& self) { return self.observer().last_flush_duration(); },
           "Seconds the last epoch took (between the last two flushes).")
      .def("export_trends", [](Graph& self, const py::object& path, py::args tags) {
        write_text(path, self.observer().csv(self.observed(strings(tags, "export_trends"), self.observer(), "export_trends")));
      }, py::arg("path"), "Writes the histories as CSV: epoch, then one column per tag.")
      .def("write_log", [](Graph& self, const py::object& path, int64_t total, py::args tags) {
        write_text(path, self.observer().log_text(total, self.observed(strings(tags, "write_log"), self.observer(), "write_log")));
      }, py::arg("path"), py::arg("total_epochs") = 0, "Writes one line per epoch with values, duration and ETA.")
      .def("_recurrent_state", [](const Graph& self) { return self.state(); })
      .def("_set_recurrent_state", &Graph::set_state)
      .def("_observation_state", [](Graph& self) { return observation_state(self.observer()); })
      .def("_restore_observation", [](Graph& self, const py::dict& s) { restore_observation(self.observer(), s); })
      .def("dot", [](const Graph& self) { return self.dot(false); }, "The graph in Graphviz DOT.")
      // profiling
      .def("enable_profiling", [](Graph& self) { self.set_profiling(true); }, "Times every node of each forward.")
      .def("disable_profiling", [](Graph& self) { self.set_profiling(false); }, "Stops timing (zero cost).")
      .def_property_readonly("profiling", &Graph::profiling, "Whether profiling is on.")
      .def("profile", [](const Graph& self) { return profile_dict(self, self.profile()); },
           "The last profiled forward: total, per-level wall times, per-node seconds, parallelism achieved.")
      .def("on_profile", [](Graph& self, std::function<void(py::dict)> fn) {
        Graph* g = &self;
        self.on_profile([g, fn](const graph::Profile& p) {
          py::gil_scoped_acquire gil;
          fn(profile_dict(*g, p));
        });
      }, py::arg("fn"), "fn(profile) runs after each profiled forward.")
      .def("timing", &Graph::timing, py::arg("tag"), "Seconds the tagged node took in the last profiled forward.")
      .def("collect_timings", [](Graph& self, py::args tags) { self.collect_timings(strings(tags, "collect_timings")); },
           "Adds the tagged nodes' last timings to the timing batch buffers (none: every tag).")
      .def("flush_timings", [](Graph& self, py::args tags) {
        return flushed_dict(self.timings().flush(self.observed(strings(tags, "flush_timings"), self.timings(), "flush_timings")));
      }, "Ends an epoch of timings; returns {tag: mean seconds}.")
      .def("timing_trend", [](Graph& self, const std::string& tag) {
        return single_trend(self, self.timings(), tag, "timing_trend");
      }, py::arg("tag"), "The tag's per-epoch timing history.")
      .def("timing_trends", [](Graph& self, py::args tags) {
        return trend_group(self.timings(), self.observed(strings(tags, "timing_trends"), self.timings(), "timing_trends"));
      }, "Timing trends of several tags (none: all).")
      .def("export_timing_trends", [](Graph& self, const py::object& path, py::args tags) {
        write_text(path, self.timings().csv(self.observed(strings(tags, "export_timing_trends"), self.timings(), "export_timing_trends")));
      }, py::arg("path"), "Writes the timing histories as CSV.")
      .def("_timing_state", [](Graph& self) { return observation_state(self.timings()); })
      .def("_restore_timings", [](Graph& self, const py::dict& s) { restore_observation(self.timings(), s); })
      .def("dot_with_profile", [](const Graph& self) { return self.dot(true); },
           "DOT with each node's last timing, slower nodes redder.");
}

void bind_builtins(py::module_& m) {
  auto f = m.def_submodule("flow", "Built-in modules for flows (fg.flow.Add(), ...).");
  py::class_<graph::Add, nn::Module, py::smart_holder>(f, "Add", "Merge: the sum of the inputs.").def(py::init<>());
  py::class_<graph::Mean, nn::Module, py::smart_holder>(f, "Mean", "Merge: the mean of the inputs.").def(py::init<>());
  py::class_<graph::Cat, nn::Module, py::smart_holder>(f, "Cat", "Merge: the inputs concatenated along dim.")
      .def(py::init<int64_t>(), py::arg("dim") = -1);
  py::class_<graph::Reshape, nn::Module, py::smart_holder>(f, "Reshape", "x.reshape(*shape) (one -1 allowed).")
      .def(py::init([](py::args shape) { return std::make_shared<graph::Reshape>(shape_args(shape).vec()); }));
  py::class_<graph::SoftmaxRouter, nn::Module, py::smart_holder>(f, "SoftmaxRouter",
      "Gate router: softmax(Linear(in_dim, n)(x)), weights [..., n] summing to 1.")
      .def(py::init<int64_t, int64_t>(), py::arg("in_dim"), py::arg("n"));
  py::class_<graph::SigmoidRouter, nn::Module, py::smart_holder>(f, "SigmoidRouter",
      "Gate router: sigmoid(Linear(in_dim, n)(x)), independent weights [..., n] in (0, 1).")
      .def(py::init<int64_t, int64_t>(), py::arg("in_dim"), py::arg("n"));
  py::class_<graph::ArgmaxSelector, nn::Module, py::smart_holder>(f, "ArgmaxSelector",
      "Switch selector: the branch whose Linear(in_dim, n) score, averaged over the batch, is highest.")
      .def(py::init<int64_t, int64_t>(), py::arg("in_dim"), py::arg("n"));
  py::class_<graph::FixedSelector, nn::Module, py::smart_holder>(f, "FixedSelector", "Switch selector: always branch i.")
      .def(py::init<int64_t>(), py::arg("i"));
  py::class_<graph::LearnedHalt, nn::Module, py::smart_holder>(f, "LearnedHalt",
      "Loop halt: mean(Linear(in_dim, 1)(x)); the loop stops when it is > 0.")
      .def(py::init<int64_t>(), py::arg("in_dim"));
  py::class_<graph::ThresholdHalt, nn::Module, py::smart_holder>(f, "ThresholdHalt",
      "Loop halt: mean(x) - threshold; the loop stops once the mean exceeds the threshold.")
      .def(py::init<double>(), py::arg("threshold"));
  py::class_<graph::StateAdd, nn::Module, py::smart_holder>(f, "StateAdd",
      "State module: x + state, where state is a forward reference (zeros on the first call).")
      .def(py::init<>());
}

}  // namespace

void bind_graph(py::module_& m) {
  graph::set_release_interpreter([]() -> std::shared_ptr<void> {
    if (!PyGILState_Check()) return nullptr;
    return std::make_shared<py::gil_scoped_release>();
  });
  static unsigned long main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  graph::set_interrupt_check([] {  // Python runs signal handlers on its main thread only
    if (PyThread_get_thread_ident() != main_thread) return;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // KeyboardInterrupt after Ctrl-C
  });
  graph::set_default_log([](const std::string& line) {
    py::gil_scoped_acquire gil;
    py::print(line);
  });
  bind_graph_class(m);
  bind_builder(m);
  bind_builtins(m);
}

}  // namespace fg::py_bind
