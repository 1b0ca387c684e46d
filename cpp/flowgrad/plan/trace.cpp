// The tracer: an op observer that records every call while a step runs once.
#include <mutex>

#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

// A fresh storage's serial: everything made from now on has a larger one.
uint64_t next_serial() { return Storage::wrap(nullptr, 0, Device{}, [] {})->serial() + 1; }

}  // namespace

Tracer::Tracer() : first_serial(next_serial()), rng_start(rng_state()) { push_op_observer(this); }

Tracer::~Tracer() { stop(); }

void Tracer::stop() {
  if (!active_) return;
  active_ = false;
  rng_end = rng_state();
  pop_op_observer(this);
}

// Called under the registry's observer lock, so calls from pool threads append one at a time,
// each after the calls that produced its inputs.
void Tracer::on_op(const OpDef& op, TensorList in, const Tensors& out, const Attrs& attrs) {
  calls.push_back({&op, attrs, in.vec(), out});
}

void Tracer::on_host_read(const Tensor& t, const char* what) { host_reads.emplace_back(t, what); }

}  // namespace fg::plan
