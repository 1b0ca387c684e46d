#include "flowgrad/graph/graph.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <sstream>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "flowgrad/graph/control_flow.h"
#include "flowgrad/ops/dispatch.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/ops/rng.h"
#include "flowgrad/base/parallel.h"

namespace fg::graph {
namespace {

using Clock = std::chrono::steady_clock;

ReleaseInterpreter g_release = nullptr;
CheckInterrupt g_interrupt = nullptr;
DefaultLog g_default_log = nullptr;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// SplitMix64 finaliser: decorrelates the per-node random streams of a parallel level.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

void set_release_interpreter(ReleaseInterpreter fn) { g_release = fn; }
ControlFlow* control_flow() { return innermost_trace_as<ControlFlow>(); }
void set_interrupt_check(CheckInterrupt fn) { g_interrupt = fn; }
void set_default_log(DefaultLog fn) { g_default_log = fn; }

const char* kind_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::Input: return "input";
    case NodeKind::Module: return "through";
    case NodeKind::Merge: return "merge";
    case NodeKind::Also: return "also";
    case NodeKind::Gate: return "gate";
    case NodeKind::Switch: return "switch";
    case NodeKind::Loop: return "loop";
    case NodeKind::Map: return "map";
  }
  return "?";
}

std::string Node::label() const {
  auto type = [&](size_t i) { return i < modules.size() && modules[i] ? modules[i]->type_name() : std::string("?"); };
  std::ostringstream os;
  switch (kind) {
    case NodeKind::Input: os << "input " << (tag.empty() ? "input" : tag); break;
    case NodeKind::Module: os << type(0); break;
    case NodeKind::Merge: os << "merge(" << type(0) << ")"; break;
    case NodeKind::Also: os << "also(" << type(0) << ")"; break;
    case NodeKind::Gate: os << "gate(" << type(0) << "; " << modules.size() - 1 << " experts)"; break;
    case NodeKind::Switch: os << "switch(" << type(0) << "; " << modules.size() - 1 << " branches)"; break;
    case NodeKind::Loop:
      os << "loop(" << type(0) << ") ";
      if (loop_mode == LoopMode::For) os << "for " << count;
      else os << (loop_mode == LoopMode::While ? "while " : "until ") << type(1) << " max " << count;
      break;
    case NodeKind::Map:
      os << "map(" << type(0) << ") ";
      if (map_mode == MapMode::Each) os << "each";
      else if (map_mode == MapMode::Over) os << "over '" << over.tag << "'";
      else os << "slices " << count;
      if (batched) os << " batched";
      break;
  }
  return os.str();
}

std::string Node::name(int id) const {
  std::ostringstream os;
  os << "node " << id;
  if (!tag.empty() && kind != NodeKind::Input) os << " '" << tag << "'";
  os << " (" << label() << ")";
  return os.str();
}

double Profile::parallelism() const {
  double nodes = 0, levels = 0;
  for (double s : node_seconds) nodes += s;
  for (double s : level_seconds) levels += s;
  return levels > 0 ? nodes / levels : 1.0;
}

// ---------------------------------------------------------------------------------------------
// Construction

Graph::Graph(std::vector<Node> nodes, std::vector<std::string> input_names, int output)
    : nn::Module("Graph"), nodes_(std::move(nodes)), input_names_(std::move(input_names)), output_(output) {
  levels_.resize(1);
  for (size_t id = 0; id < nodes_.size(); ++id) {
    Node& n = nodes_[id];
    if (!n.tag.empty()) tags_[n.tag] = static_cast<int>(id);
    if (!n.group.empty()) groups_[n.group].push_back(n.tag);
    if (n.kind == NodeKind::Input) continue;
    int level = 0;
    auto after = [&](int dep) { level = std::max(level, nodes_[dep].level); };
    for (int in : n.inputs) after(in);
    for (const Ref& r : n.refs)
      if (!r.state) after(r.node);
    if (n.kind == NodeKind::Map && n.map_mode == MapMode::Over) after(n.over.node);
    n.level = level + 1;
    if (static_cast<int>(levels_.size()) <= n.level) levels_.resize(n.level + 1);
    levels_[n.level].push_back(static_cast<int>(id));
    for (const Ref& r : n.refs)
      if (r.state && std::find(state_tags_.begin(), state_tags_.end(), r.tag) == state_tags_.end())
        state_tags_.push_back(r.tag);
    // Parameters are reachable by node index: "3.weight"; constructs hold their parts by role.
    if (n.modules.size() == 1 && (n.kind == NodeKind::Module || n.kind == NodeKind::Merge || n.kind == NodeKind::Also)) {
      register_module(std::to_string(id), n.modules[0]);
      continue;
    }
    auto holder = std::make_shared<nn::Module>(kind_name(n.kind));
    for (size_t i = 0; i < n.modules.size(); ++i) {
      std::string role = std::to_string(i - 1);
      if (i == 0) role = n.kind == NodeKind::Gate ? "router" : n.kind == NodeKind::Switch ? "selector" : "body";
      if (n.kind == NodeKind::Loop && i == 1) role = "halt";
      holder->register_module(role, n.modules[i]);
    }
    register_module(std::to_string(id), holder);
  }
}

std::shared_ptr<Graph> Graph::clone_with(const std::function<ModulePtr(const ModulePtr&)>& copy_module,
                                        const std::function<Tensor(const Tensor&)>& copy_tensor) const {
  std::vector<Node> nodes = nodes_;
  for (Node& n : nodes)
    for (ModulePtr& m : n.modules) m = copy_module(m);
  auto g = std::make_shared<Graph>(std::move(nodes), input_names_, output_);
  auto copy_all = [&](const Tensors& ts) {
    Tensors out;
    for (const Tensor& t : ts) out.push_back(t.defined() ? copy_tensor(t) : Tensor());
    return out;
  };
  g->last_ = copy_all(last_);
  for (const Tensors& trace : traces_) g->traces_.push_back(copy_all(trace));
  for (const auto& [tag, t] : state_) g->state_[tag] = t.defined() ? copy_tensor(t) : Tensor();
  g->frozen_ = copy_all(frozen_);
  g->training_ = training_;
  g->type_name_ = type_name_;
  g->parallel_ = parallel_;
  g->observer_ = observer_;
  g->timings_ = timings_;
  g->logging_ = logging_;
  g->log_tags_ = log_tags_;
  g->log_total_ = log_total_;
  g->log_callbacks_ = log_callbacks_;
  g->profiling_ = profiling_;
  g->profile_ = profile_;
  g->profile_callbacks_ = profile_callbacks_;
  return g;
}

int Graph::node_of(const std::string& tag) const {
  auto it = tags_.find(tag);
  if (it != tags_.end()) return it->second;
  if (groups_.count(tag))
    fail(ErrorKind::Graph, "'", tag, "' is a tag group, not a tag; its tags are ", joined(groups_.at(tag)));
  std::vector<std::string> known = observe::closest_first(tag, tags());
  fail(ErrorKind::Graph, "unknown tag '", tag, "' (the graph's tags: ",
       known.empty() ? "none" : joined(known), ")");
}

std::vector<std::string> Graph::group(const std::string& name) const {
  auto it = groups_.find(name);
  return it == groups_.end() ? std::vector<std::string>{} : it->second;
}

std::vector<std::string> Graph::expand(const std::vector<std::string>& tags_or_groups) const {
  std::vector<std::string> out;
  for (const std::string& t : tags_or_groups) {
    std::vector<std::string> members = group(t);
    if (members.empty()) out.push_back(t);
    else out.insert(out.end(), members.begin(), members.end());
  }
  return out;
}

std::vector<std::string> Graph::observed(const std::vector<std::string>& tags_or_groups,
                                         const observe::Observer& obs, const char* what) const {
  std::vector<std::string> out = expand(tags_or_groups), recorded = obs.tags();
  auto is_recorded = [&](const std::string& t) { return std::find(recorded.begin(), recorded.end(), t) != recorded.end(); };
  for (const std::string& t : out) {
    if (tags_.count(t) || is_recorded(t)) continue;
    std::vector<std::string> known = tags();
    for (const std::string& r : recorded)
      if (!tags_.count(r)) known.push_back(r);
    for (const auto& [name, members] : groups_) known.push_back(name);
    fail(ErrorKind::Graph, what, ": unknown tag '", t, "'; it is not a tag of the graph and was never recorded ",
         "(known tags, closest first: ", known.empty() ? "none" : joined(observe::closest_first(t, known)), ")");
  }
  return out;
}

std::vector<std::string> Graph::tags() const {
  std::vector<std::string> out;
  for (const Node& n : nodes_)
    if (!n.tag.empty()) out.push_back(n.tag);
  return out;
}

Tensor Graph::tagged(const std::string& tag) const {
  int id = node_of(tag);
  FG_CHECK(static_cast<size_t>(id) < last_.size(), Graph, "tag '", tag, "' has no value yet: run the graph first");
  return last_[id];
}

void Graph::set_tagged(const std::string& tag, const Tensor& value) {
  int id = node_of(tag);
  FG_CHECK(static_cast<size_t>(id) < last_.size(), Graph, "tag '", tag, "' has no value yet: run the graph first");
  last_[id] = value;
}

const Tensors& Graph::traces(const std::string& tag) const {
  int id = node_of(tag);
  FG_CHECK(nodes_[id].kind == NodeKind::Loop, Graph, "traces('", tag, "'): ", nodes_[id].name(id),
           " is not a loop; traces are the per-iteration outputs of a loop");
  static const Tensors none;
  return static_cast<size_t>(id) < traces_.size() ? traces_[id] : none;
}

ModulePtr Graph::sub(const std::string& tag) const {
  int id = node_of(tag);
  FG_CHECK(nodes_[id].kind != NodeKind::Input, Graph, "sub('", tag, "'): '", tag, "' is a graph input, not a module");
  return child(std::to_string(id));
}

nn::Named<Tensor> Graph::parameters_by_tag(const std::string& tag) const {
  nn::Named<Tensor> out;
  std::vector<std::string> tags = expand({tag});
  for (const std::string& t : tags) {
    int id = node_of(t);
    if (auto m = child(std::to_string(id)))
      for (auto& [name, p] : m->named_parameters()) out.emplace_back(std::to_string(id) + "." + name, p);
  }
  return out;
}

void Graph::set_requires_grad_of(const std::vector<std::string>& tags, bool frozen) {
  nn::Named<Tensor> params;
  if (tags.empty()) params = named_parameters();
  for (const std::string& t : expand(tags)) {
    nn::Named<Tensor> more = parameters_by_tag(t);
    params.insert(params.end(), more.begin(), more.end());
  }
  for (auto& [name, p] : params) {
    set_requires_grad(p, !frozen);
    auto pos = std::find_if(frozen_.begin(), frozen_.end(), [&p = p](const Tensor& f) { return f.impl() == p.impl(); });
    if (frozen && pos == frozen_.end()) frozen_.push_back(p);
    if (!frozen && pos != frozen_.end()) frozen_.erase(pos);
  }
}

void Graph::freeze(const std::vector<std::string>& tags) { set_requires_grad_of(tags, true); }
void Graph::unfreeze(const std::vector<std::string>& tags) { set_requires_grad_of(tags, false); }
void Graph::zero_frozen_grads() {
  for (const Tensor& p : frozen_) set_grad(p, Tensor());
}

void Graph::set_frozen(const Tensors& params) {
  nn::Named<Tensor> own = named_parameters();
  for (const Tensor& p : params)
    FG_CHECK(std::any_of(own.begin(), own.end(), [&p](const auto& e) { return e.second.impl() == p.impl(); }), Graph,
             "set_frozen: a frozen tensor of shape ", to_string(p.shape()), " is not a parameter of this graph");
  frozen_ = params;
}

std::optional<Graph::LogSettings> Graph::log_settings() const {
  if (!logging_) return std::nullopt;
  return LogSettings{log_tags_, log_total_, log_every_};
}

void Graph::detach_state() {
  for (auto& [tag, value] : state_) value = detach(value);
}
void Graph::reset_state() { state_.clear(); }
void Graph::set_state(const std::string& tag, const Tensor& value) {
  FG_CHECK(std::find(state_tags_.begin(), state_tags_.end(), tag) != state_tags_.end(), Graph, "set_state: '", tag,
           "' is not recurrent state of this graph (no forward reference uses it)");
  state_[tag] = value;
}

// ---------------------------------------------------------------------------------------------
// Execution

struct Graph::Run {
  Tensors values;
  std::vector<Tensors> traces;
  std::optional<Clock::time_point> deadline;
  double timeout = 0;

  // Between steps: stops on an interrupt (Ctrl-C) or once the timeout has passed.
  void check_stop(const char* where) const {
    if (g_interrupt) g_interrupt();
    if (deadline && Clock::now() > *deadline)
      fail(ErrorKind::Timeout, "Graph.forward: timed out after ", timeout, " s (checked ", where, ")");
  }
};

Tensor Graph::call(const ModulePtr& m, Tensors in, int id) const {
  Tensors out = (*m)(in);
  FG_CHECK(out.size() == 1 && out[0].defined(), Graph, nodes_[id].name(id), ": ", m->type_name(), " returned ",
           out.size(), " outputs; a graph node passes on exactly one tensor");
  return out[0];
}

Tensors Graph::ref_values(const Node& node, const Run& run, const Tensor& like) const {
  Tensors out;
  for (const Ref& r : node.refs) {
    if (!r.state) {
      out.push_back(run.values[r.node]);
      continue;
    }
    auto it = state_.find(r.tag);  // recurrent state: zeros shaped like the input on the first call
    out.push_back(it != state_.end() ? it->second : zeros(like.shape(), like.dtype(), like.device()));
  }
  return out;
}

Tensor Graph::run_loop(const Node& node, int id, Tensor x, const Tensors& refs, Run& run) {
  // A while_/until loop's iterations draw from streams derived from its start, as its compiled
  // form does (the plan runs one traced body per iteration); a for-loop is unrolled when traced.
  const bool derived = node.loop_mode != LoopMode::For;
  const RngState rng = derived ? rng_fork() : RngState{};
  if (ControlFlow* cf = control_flow(); cf && derived)
    return cf->run_loop({node.name(id), node.loop_mode == LoopMode::Until, node.count, rng, x, refs, node.modules[0],
                         node.modules[1], [this, id](const ModulePtr& m, const Tensors& in) { return call(m, in, id); }});
  Tensors& trace = run.traces[id];
  auto halted = [&](const Tensor& v, int64_t i) {
    RngStream stream(derive_stream(rng, kHaltStreams + static_cast<uint64_t>(i)));
    return item(call(node.modules[1], {v}, id)) > 0;
  };
  auto step = [&](const Tensor& v, int64_t i) {
    run.check_stop("between loop iterations");
    Tensors in{v};
    in.insert(in.end(), refs.begin(), refs.end());
    std::optional<RngStream> stream;
    if (derived) stream.emplace(derive_stream(rng, kLoopStreams + static_cast<uint64_t>(i)));
    Tensor y = call(node.modules[0], in, id);
    trace.push_back(detach(y));
    return y;
  };
  for (int64_t i = 0; i < node.count; ++i) {
    if (node.loop_mode == LoopMode::While && halted(x, i)) break;
    x = step(x, i);
    if (node.loop_mode == LoopMode::Until && halted(x, i)) break;
  }
  return x;
}

Tensor Graph::run_map(const Node& node, int id, const Tensor& x, const Tensors& refs, Run& run) {
  const Tensor& source = node.map_mode == MapMode::Over ? run.values[node.over.node] : x;
  auto body = [&](const Tensor& v) {
    run.check_stop("between map elements");
    Tensors in{v};
    in.insert(in.end(), refs.begin(), refs.end());
    return call(node.modules[0], in, id);
  };
  FG_CHECK(source.ndim() >= 1, Shape, nodes_[id].name(id), ": cannot map over a 0-d tensor");
  if (node.map_mode == MapMode::Slices) {
    int64_t n = node.count, width = source.shape().back();
    FG_CHECK(width % n == 0, Shape, nodes_[id].name(id), ": the last dim (", width, ") of shape ",
             to_string(source.shape()), " does not split into ", n, " equal slices");
    int64_t k = width / n;
    if (!node.batched) {
      Tensors parts;
      for (int64_t i = 0; i < n; ++i) parts.push_back(body(narrow(source, -1, i * k, k)));
      return cat(parts, -1);
    }
    std::vector<int64_t> split_shape(source.shape().begin(), source.shape().end());
    split_shape.back() = n;
    split_shape.push_back(k);
    Tensor y = body(reshape(source, split_shape));
    FG_CHECK(y.ndim() == source.ndim() + 1 && y.shape()[y.ndim() - 2] == n, Shape, nodes_[id].name(id),
             ": a batched slices body must keep the slice dim: got ", to_string(y.shape()), " from ",
             to_string(Dims(split_shape)));
    std::vector<int64_t> joined_shape(y.shape().begin(), y.shape().end() - 1);
    joined_shape.back() = n * y.shape().back();
    return reshape(y, joined_shape);
  }
  if (node.batched) return body(source);
  int64_t n = source.shape()[0];
  FG_CHECK(n > 0, Shape, nodes_[id].name(id), ": nothing to map over (dim 0 of shape ", to_string(source.shape()),
           " is empty)");
  Tensors parts;
  for (int64_t i = 0; i < n; ++i) parts.push_back(body(select(source, 0, i)));
  return stack(parts, 0);
}

Tensor Graph::run_node(int id, Run& run) {
  const Node& n = nodes_[id];
  try {
    const Tensor& x = run.values[n.inputs[0]];
    Tensors refs = ref_values(n, run, x);
    auto with_refs = [&](Tensors in) {
      in.insert(in.end(), refs.begin(), refs.end());
      return in;
    };
    switch (n.kind) {
      case NodeKind::Input: break;
      case NodeKind::Module: return call(n.modules[0], with_refs({x}), id);
      case NodeKind::Also: return x + call(n.modules[0], with_refs({x}), id);
      case NodeKind::Merge: {
        Tensors in;
        for (int i : n.inputs) in.push_back(run.values[i]);
        return call(n.modules[0], with_refs(in), id);
      }
      case NodeKind::Gate: {
        Tensor w = call(n.modules[0], with_refs({x}), id);
        int64_t experts = static_cast<int64_t>(n.modules.size()) - 1;
        FG_CHECK(w.ndim() >= 1 && w.shape().back() == experts, Shape, n.name(id), ": router weights must have shape [..., ",
                 experts, "], got ", to_string(w.shape()));
        Tensor out;
        for (int64_t e = 0; e < experts; ++e) {
          Tensor y = call(n.modules[e + 1], {x}, id);
          Tensor we = narrow(w, -1, e, 1);  // [..., 1], broadcast over the expert's trailing dims
          std::vector<int64_t> shape(we.shape().begin(), we.shape().end());
          while (static_cast<int>(shape.size()) < y.ndim()) shape.push_back(1);
          Tensor term = reshape(we, shape) * y;
          out = out.defined() ? out + term : term;
        }
        return out;
      }
      case NodeKind::Switch: {
        Tensor chosen = call(n.modules[0], with_refs({x}), id);
        FG_CHECK(chosen.numel() == 1, Shape, n.name(id), ": the selector must return one branch index, got shape ",
                 to_string(chosen.shape()));
        // Each branch draws from its own stream, as in the compiled switch (one block per branch).
        const RngState rng = rng_fork();
        if (ControlFlow* cf = control_flow())
          return cf->run_switch({n.name(id), chosen, rng, x, {n.modules.begin() + 1, n.modules.end()},
                                 [this, id](const ModulePtr& m, const Tensors& in) { return call(m, in, id); }});
        double v = item(chosen);
        int64_t branches = static_cast<int64_t>(n.modules.size()) - 1, index = static_cast<int64_t>(v);
        FG_CHECK(v == static_cast<double>(index) && index >= 0 && index < branches, Index, n.name(id),
                 ": the selector chose branch ", v, " but there are ", branches, " branches");
        RngStream stream(derive_stream(rng, kSwitchStreams + static_cast<uint64_t>(index)));
        return call(n.modules[index + 1], {x}, id);
      }
      case NodeKind::Loop: return run_loop(n, id, x, refs, run);
      case NodeKind::Map: return run_map(n, id, x, refs, run);
    }
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Timeout || std::string(e.what()).rfind("node ", 0) == 0) throw;
    fail(e.kind(), n.name(id), ": ", e.what());
  }
  FG_ASSERT(false);
}

void Graph::run_level(const std::vector<int>& ids, Run& run) {
  auto timed = [&](int id) {
    if (!profiling_) return void(run.values[id] = run_node(id, run));
    auto start = Clock::now();
    run.values[id] = run_node(id, run);
    profile_.node_seconds[id] = since(start);
  };
  if (ids.size() == 1) return timed(ids[0]);

  // Independent nodes: each draws random numbers from its own stream, derived from the
  // generator state at the level's start, so results do not depend on scheduling and match
  // sequential execution exactly.
  const RngState base = rng_fork();
  const ExecContext caller = context();  // each task runs under it: autocast, grad and anomaly modes...
  std::vector<std::exception_ptr> errors(ids.size());
  // On CUDA each branch queues its kernels on a stream of its own, forked from and joined to the
  // caller's current stream (cuda/stream.h), so the branches also overlap on the GPU.
  const std::vector<int>& first_inputs = nodes_[ids[0]].inputs;
  const Tensor* x0 = first_inputs.empty() ? nullptr : &run.values[first_inputs[0]];
  std::optional<cuda::Fork> fork;
  if (x0 && x0->defined() && x0->device().is_cuda()) fork.emplace(x0->device().index, static_cast<int>(ids.size()));
  auto task = [&](int i) {
    ContextGuard inherit(caller);
    std::optional<cuda::DeviceGuard> on_device;  // a pool thread's current device is cuda:0
    std::optional<cuda::StreamGuard> on_branch;
    if (fork) on_device.emplace(fork->device()), on_branch.emplace(fork->device(), fork->branch(i));
    RngStream stream(derive_stream(base, static_cast<uint64_t>(ids[i])));
    try {
      timed(ids[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  if (parallel_ && pool_threads() > 1 && !in_parallel_region() && !tracing()) {
    std::shared_ptr<void> released = g_release ? g_release() : nullptr;
    SingleThreadedBlas blas;  // one BLAS thread per branch; the branches are the parallelism
    detail::run_tasks(static_cast<int>(ids.size()), [](void* ctx, int i) { (*static_cast<decltype(task)*>(ctx))(i); },
                      &task);
  } else {
    for (size_t i = 0; i < ids.size(); ++i) task(static_cast<int>(i));
  }
  if (fork) fork->join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

Tensors Graph::forward(const Tensors& inputs) { return forward_with_timeout(inputs, std::nullopt); }

Tensors Graph::forward_with_timeout(const Tensors& inputs, std::optional<double> seconds) {
  FG_CHECK(inputs.size() == input_names_.size(), Graph, "Graph: expected ", input_names_.size(), " input(s) (",
           joined(input_names_), "), got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    FG_CHECK(inputs[i].defined(), Graph, "Graph: input '", input_names_[i], "' is None");
  FG_CHECK(!seconds || *seconds > 0, Value, "Graph.forward: timeout must be > 0 seconds, got ", *seconds);
  auto start = Clock::now();
  observer_.start_clock();  // the first epoch is timed from the first forward
  timings_.start_clock();
  Run run;
  run.values.resize(nodes_.size());
  run.traces.resize(nodes_.size());
  if (seconds) {
    run.timeout = *seconds;
    run.deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*seconds));
  }
  size_t next_input = 0;
  for (size_t id = 0; id < nodes_.size(); ++id)
    if (nodes_[id].kind == NodeKind::Input) run.values[id] = inputs[next_input++];
  if (profiling_) {
    profile_.node_seconds.assign(nodes_.size(), 0.0);
    profile_.level_seconds.assign(levels_.size(), 0.0);
  }
  for (size_t level = 1; level < levels_.size(); ++level) {
    run.check_stop("between levels");
    auto level_start = Clock::now();
    run_level(levels_[level], run);
    if (profiling_) profile_.level_seconds[level] = since(level_start);
  }
  last_.assign(nodes_.size(), Tensor());
  for (const auto& [tag, id] : tags_) last_[id] = detach(run.values[id]);
  traces_ = std::move(run.traces);
  for (const std::string& tag : state_tags_) state_[tag] = run.values[tags_.at(tag)];
  if (profiling_) {
    profile_.total = since(start);
    for (auto& fn : profile_callbacks_) fn(profile_);
  }
  return {run.values[output_]};
}

// ---------------------------------------------------------------------------------------------
// Observation and profiling

void Graph::collect(const std::vector<std::string>& tags) {
  std::vector<std::string> chosen = tags.empty() ? this->tags() : expand(tags);
  for (const std::string& tag : chosen) {
    int id = node_of(tag);
    FG_CHECK(static_cast<size_t>(id) < last_.size(), Graph, "collect('", tag,
             "'): the tag has no value yet: run the graph first");
    observer_.record(tag, last_[id]);
  }
  log_progress();
}

void Graph::record(const std::string& tag, const std::vector<Recorded>& values) {
  FG_CHECK(!values.empty(), Value, "record('", tag, "'): expected at least one value");
  for (const Recorded& v : values) std::visit([&](const auto& x) { observer_.record(tag, x); }, v);
  log_progress();
}

std::vector<std::pair<std::string, double>> Graph::flush(const std::vector<std::string>& tags, observe::Reduce reduce) {
  std::vector<std::string> chosen = observed(tags, observer_, "flush");
  if (logging_) observed(log_tags_, observer_, "log");  // log() may name tags recorded later: checked now
  auto flushed = observer_.flush(chosen, reduce);
  last_progress_step_ = 0;
  if (logging_) emit_log(observer_.log_line(observer_.flush_count(), log_total_, log_tags_));
  return flushed;
}

void Graph::log(const std::vector<std::string>& tags, int64_t total_epochs, int64_t every) {
  FG_CHECK(total_epochs >= 0, Value, "log: total_epochs must be >= 0, got ", total_epochs);
  FG_CHECK(every >= 0, Value, "log: every must be >= 0 steps (0: no progress lines), got ", every);
  logging_ = true;
  log_tags_ = expand(tags);
  log_total_ = total_epochs;
  log_every_ = every;
}

void Graph::emit_log(const std::string& line) const {
  for (const auto& fn : log_callbacks_) fn(line);
  if (log_callbacks_.empty() && g_default_log) g_default_log(line);
}

// The progress line when the open batch reached a multiple of log(every=N) steps.
void Graph::log_progress() {
  if (!logging_ || log_every_ == 0) return;
  int64_t step = observer_.pending_steps(log_tags_);
  if (step == last_progress_step_ || step % log_every_ != 0) return;
  last_progress_step_ = step;
  emit_log(observer_.progress_line(step, log_total_, log_tags_));
}

double Graph::timing(const std::string& tag) const {
  int id = node_of(tag);
  FG_CHECK(profiling_ || !profile_.node_seconds.empty(), Graph, "timing('", tag,
           "'): profiling is off; call enable_profiling() and run the graph");
  return static_cast<size_t>(id) < profile_.node_seconds.size() ? profile_.node_seconds[id] : 0.0;
}

void Graph::collect_timings(const std::vector<std::string>& tags) {
  std::vector<std::string> chosen = tags.empty() ? this->tags() : expand(tags);
  for (const std::string& tag : chosen) timings_.record(tag, timing(tag));
}

std::string Graph::dot(bool with_profile) const {
  bool timed = with_profile && !profile_.node_seconds.empty();
  double slowest = 0;
  if (timed) slowest = *std::max_element(profile_.node_seconds.begin(), profile_.node_seconds.end());
  std::ostringstream os;
  os << "digraph flow {\n  rankdir=TB;\n"
     << "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3fb\", fontname=\"Helvetica\", fontsize=11];\n"
     << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    std::string label = n.kind == NodeKind::Input ? "input " + (n.tag.empty() ? input_names_[0] : n.tag) : n.label();
    if (!n.tag.empty() && n.kind != NodeKind::Input) label += "\n#" + n.tag;
    if (timed && n.kind != NodeKind::Input) label += "\n" + observe::format_duration(profile_.node_seconds[id]);
    os << "  n" << id << " [label=\"" << dot_escape(label) << "\"";
    if (timed && n.kind != NodeKind::Input) {
      double s = profile_.node_seconds[id];
      int heat = slowest > 0 ? static_cast<int>(255 - 155 * s / slowest) : 255;  // slower: redder
      char color[16];
      std::snprintf(color, sizeof color, "#ff%02x%02x", heat, heat);
      os << ", fillcolor=\"" << color << "\"";
    }
    if (n.kind == NodeKind::Input) os << ", shape=ellipse, fillcolor=\"#f4f4f4\"";
    os << "];\n";
  }
  for (const auto& [name, members] : groups_) {
    os << "  subgraph \"cluster_" << dot_escape(name) << "\" { label=\"" << dot_escape(name) << "\"; style=dashed;";
    for (const std::string& t : members) os << " n" << tags_.at(t) << ";";
    os << " }\n";
  }
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    for (int in : n.inputs) os << "  n" << in << " -> n" << id << ";\n";
    for (const Ref& r : n.refs) {
      if (r.state)
        os << "  n" << r.node << " -> n" << id << " [style=dotted, color=\"#c0392b\", constraint=false, label=\"state "
           << dot_escape(r.tag) << "\"];\n";
      else
        os << "  n" << r.node << " -> n" << id << " [style=dashed, label=\"" << dot_escape(r.tag) << "\"];\n";
    }
    if (n.kind == NodeKind::Map && n.map_mode == MapMode::Over)
      os << "  n" << n.over.node << " -> n" << id << " [style=dashed, label=\"over\"];\n";
  }
  os << "  output [shape=ellipse, fillcolor=\"#f4f4f4\", label=\"output";
  if (timed) os << "\\n" << observe::format_duration(profile_.total);
  os << "\"];\n  n" << output_ << " -> output;\n}\n";
  return os.str();
}

}  // namespace fg::graph
