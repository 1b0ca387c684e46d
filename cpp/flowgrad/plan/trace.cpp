// The tracer: an op observer that records every call while a step runs once.
#include <mutex>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

// A fresh storage's serial: everything made from now on has a larger one.
uint64_t next_serial() { return Storage::wrap(nullptr, 0, Device{}, [] {})->serial() + 1; }

// The modules running on this thread, innermost last (graph nodes may run on pool threads).
thread_local std::vector<const nn::Module*> t_modules;

}  // namespace

Tracer::Tracer() : first_serial(next_serial()), rng_start(rng_state()) {
  set_shape_only_trace(first_serial);
  trace_mode_.emplace(this);
  previous_ = graph::control_flow();
  graph::set_control_flow(this);
  previous_observer_ = nn::call_observer();
  nn::set_call_observer(this);
}

Tracer::~Tracer() { stop(); }

void Tracer::stop() {
  if (!active_) return;
  active_ = false;
  rng_end = rng_state();
  trace_mode_.reset();
  set_shape_only_trace(0);
  graph::set_control_flow(previous_);
  nn::set_call_observer(previous_observer_);
}

void Tracer::enter(const nn::Module& m) {
  t_modules.push_back(&m);
  std::lock_guard<std::mutex> lock(mutex_);
  relocate();
}
void Tracer::leave() {
  if (!t_modules.empty()) t_modules.pop_back();
}

void Tracer::note_source() {
  std::lock_guard<std::mutex> lock(mutex_);
  relocate();
}

void Tracer::relocate() {
  if (!locate) return;
  std::string source = locate();
  if (!source.empty()) source_ = std::move(source);
}

int Tracer::origin() {
  if (const Node* node = running_backward()) {  // a backward op: where its forward call came from
    auto found = node_origins.find(node);
    if (found != node_origins.end()) return found->second;
  }
  std::string module;
  for (auto it = t_modules.rbegin(); it != t_modules.rend() && module.empty(); ++it) {
    auto found = module_names.find(*it);
    if (found != module_names.end()) module = found->second;
  }
  if (origins.empty() || origins.back().module != module || origins.back().source != source_)
    origins.push_back({std::move(module), source_});
  return static_cast<int>(origins.size()) - 1;
}

// Called under the registry's observer lock, so calls from pool threads append one at a time,
// each after the calls that produced its inputs.
void Tracer::on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) {
  std::lock_guard<std::mutex> lock(mutex_);
  relocate();
  const int at = origin();
  (open_.empty() ? calls : open_.back()).push_back({&op, attrs, in.vec(), out, nullptr, at});
  for (const Tensor& t : out)  // autograd recorded the call before this mode saw it
    if (auto node = t.defined() ? grad_fn(t) : nullptr) node_origins.emplace(node.get(), at);
}

void Tracer::begin_block() {
  std::lock_guard<std::mutex> lock(mutex_);
  open_.emplace_back();
}

std::vector<TracedCall> Tracer::end_block() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TracedCall> block = std::move(open_.back());
  open_.pop_back();
  return block;
}

void Tracer::add_branch(std::shared_ptr<TracedBranch> branch) {
  std::lock_guard<std::mutex> lock(mutex_);
  (open_.empty() ? calls : open_.back()).push_back({nullptr, {}, {}, branch->owned, std::move(branch), origin()});
}

// A value computed from the step's inputs has no data while tracing: the read raises here, before
// it would reach the missing bytes. Other reads are checked when the plan is built.
void Tracer::on_host_read(const Tensor& t, const char* what) {
  FG_CHECK(!t.storage()->is_shape_only(), Value, host_read_message(t, what));
  host_reads.emplace_back(t, what);
}

std::string host_read_message(const Tensor& t, const std::string& what) {
  return "compile: the step reads a computed value on the host (" + what + " of " + describe(t) +
         "): a plan would replay the decision made while tracing. Data-dependent control flow in Python "
         "(.item() inside the step) cannot be compiled; FlowBuilder's switch and while_/until compile to branch "
         "instructions";
}

}  // namespace fg::plan
