// The tracer: an op observer that records every call of its thread while a step runs once.
#include <algorithm>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

// A fresh storage's serial: everything made from now on has a larger one.
uint64_t next_serial() { return Storage::wrap(nullptr, 0, Device{}, [] {})->serial() + 1; }

}  // namespace

Tracer::Tracer() : first_serial(next_serial()), rng_start(rng_state()) { trace_mode_.emplace(this); }

Tracer::~Tracer() { stop(); }

void Tracer::stop() {
  if (!active_) return;
  active_ = false;
  rng_end = rng_state();
  trace_mode_.reset();
}

// Only calls that can make a folded constant run their kernel: not random, every input real memory
// made during the trace (views always run: they copy nothing). The others only apply their shape
// rule: their outputs are shape-only tensors and an in-place write is recorded but not made.
Dispatch Tracer::dispatch(const OpDef& op, TensorList in) {
  if (op.in(Group::View)) return Dispatch::Kernel;
  if (op.in(Group::Random)) return Dispatch::ShapesOnly;
  bool constants = std::all_of(in.begin(), in.end(), [&](const Tensor& t) {
    return !t.storage()->is_shape_only() && t.storage()->serial() >= first_serial;
  });
  return constants ? Dispatch::Kernel : Dispatch::ShapesOnly;
}

void Tracer::enter(const nn::Module& m) {
  modules_.push_back(&m);
  relocate();
}
void Tracer::leave() {
  if (!modules_.empty()) modules_.pop_back();
}

void Tracer::note_source() { relocate(); }

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
  for (auto it = modules_.rbegin(); it != modules_.rend() && module.empty(); ++it) {
    auto found = module_names.find(*it);
    if (found != module_names.end()) module = found->second;
  }
  if (origins.empty() || origins.back().module != module || origins.back().source != source_)
    origins.push_back({std::move(module), source_});
  return static_cast<int>(origins.size()) - 1;
}

void Tracer::on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) {
  relocate();
  const int at = origin();
  (open_.empty() ? calls : open_.back()).push_back({&op, attrs, in.vec(), out, nullptr, at});
  for (const Tensor& t : out)  // autograd recorded the call before this mode saw it
    if (auto node = t.defined() ? grad_fn(t) : nullptr) node_origins.emplace(node.get(), at);
}

void Tracer::begin_block() {
  open_.emplace_back();
  open_ids_.push_back(++blocks_made_);
}

std::vector<TracedCall> Tracer::end_block() {
  std::vector<TracedCall> block = std::move(open_.back());
  open_.pop_back();
  open_ids_.pop_back();
  return block;
}

// ---- random streams as pairs ----

// A draw from the step's generator reads the plan's pair, `at.offset - rng_start.offset` past its
// base; a draw from a derived stream reads that stream's pair, made by philox_derive from its
// parent's pair where the draw is traced (a pair made in another block may not have run).
RngDraw Tracer::pair_at(RngState at, Device device) {
  auto found = derived_.find(at.seed);
  if (found != derived_.end()) return {derived_pair(found->second, device), static_cast<int64_t>(at.offset)};
  FG_CHECK(at.seed == rng_start.seed && at.offset >= rng_start.offset, Value, "compile: a random op draws from "
           "a generator state the step set itself (fg.manual_seed or fg.set_rng_state inside the traced step); "
           "compiled plans replay draws from the step's generator and the streams derived from it. Seed before "
           "calling the step");
  if (!philox.defined()) philox = Tensor::shape_only(Dims{2}, DType::Int64, device);
  FG_CHECK(philox.device() == device, Device, "compile: the step draws random numbers on ", philox.device().str(),
           " and on ", device.str(), "; a plan draws on one device");
  return {philox, static_cast<int64_t>(at.offset - rng_start.offset)};
}

void Tracer::on_derived(RngState base, uint64_t key, const Tensor& index, RngState derived) {
  derived_[derived.seed] = DerivedStream{base, key, index, Tensor(), 0};
}

bool Tracer::in_open_block(uint64_t block) const {
  return block == 0 || std::find(open_ids_.begin(), open_ids_.end(), block) != open_ids_.end();
}

Tensor Tracer::derived_pair(DerivedStream& s, Device device) {
  if (s.pair.defined() && in_open_block(s.block)) return s.pair;
  RngDraw parent = pair_at(s.base, device);
  Tensors in{parent.pair};
  if (s.index.defined()) {
    in.push_back(s.index);
    indices_read_.insert(s.index.storage().get());
  }
  s.pair = run_op1(op_def(OpId::philox_derive), in,
                   {{"key", static_cast<int64_t>(s.key)}, {"offset", parent.offset}});
  s.block = open_ids_.empty() ? 0 : open_ids_.back();
  return s.pair;
}

bool Tracer::reads_index(const Tensor& index) const { return indices_read_.count(index.storage().get()) > 0; }

void Tracer::add_branch(std::shared_ptr<TracedBranch> branch) {
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
