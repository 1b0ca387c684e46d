// The capture self-check (capture.h): a newly captured step and a plain step, from the same
// state, must leave the same parameters, optimizer state, gradients and outputs. Stream capture
// silently drops work queued outside the capture stream (review finding F1), so a graph can
// replay without some kernels and still report "captured"; this check turns that into a
// fallback that names the buffer. Plain C++ over a plan: the CPU tests run it with two plain
// steps (Plan::check_step).
#include <cmath>
#include <cstring>
#include <sstream>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/captured_graph.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "flowgrad/plan/capture.h"
#include "flowgrad/plan/executable.h"

namespace fg::plan {
namespace {

// What a step leaves behind, as views over the plan's memory.
struct Left {
  std::vector<std::string> names;
  std::vector<int> writers;  // the last top-level instruction writing each (-1: none)
  Tensors values;
  Tensors kept;              // the buffers to restore (outputs are rewritten by every step)
};

Tensor whole(const Buffer& b, int id) {
  int64_t n = static_cast<int64_t>(b.bytes / itemsize(b.dtype));
  return layout(b.storage, {id, 0, Dims{n}, Dims{1}, b.dtype});
}

// Ops whose CUDA kernels add floats with atomics: their sums depend on the order blocks run.
bool order_dependent(const Instruction& ins) {
  return !ins.branch && ins.op->in(Group::Atomic) && !ins.out.empty() && is_floating(ins.out[0].dtype);
}

double largest_difference(const Tensor& a, const Tensor& b) {
  Tensor a64 = cast(to_device(a, cpu_device()), DType::Float64), b64 = cast(to_device(b, cpu_device()), DType::Float64);
  const double* x = a64.data<double>();
  const double* y = b64.data<double>();
  double most = 0;
  for (int64_t i = 0; i < a64.numel(); ++i) most = std::max(most, std::fabs(x[i] - y[i]));
  return most;
}

// The first element where `expected` and `got` differ (bitwise, or by more than `tolerance` times
// the largest magnitude of `expected` and more than `noise`), as "element k: a vs b"; "" when none.
std::string first_difference(const Tensor& expected, const Tensor& got, double tolerance, double noise) {
  Tensor a = to_device(expected, cpu_device()), b = to_device(got, cpu_device());
  const size_t size = itemsize(a.dtype()), bytes = static_cast<size_t>(a.numel()) * size;
  if (std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0) return "";
  Tensor a64 = cast(a, DType::Float64), b64 = cast(b, DType::Float64);
  const double* x = a64.data<double>();
  const double* y = b64.data<double>();
  double scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, std::fabs(x[i]));
  const double allowed = std::max(tolerance * scale, noise);
  for (int64_t i = 0; i < a.numel(); ++i) {
    bool same_bits = std::memcmp(static_cast<const char*>(a.data_ptr()) + i * size,
                                 static_cast<const char*>(b.data_ptr()) + i * size, size) == 0;
    if (same_bits || (tolerance > 0 && std::fabs(x[i] - y[i]) <= allowed)) continue;
    std::ostringstream os;
    os.precision(9);
    os << "element " << i << ": " << x[i] << " (plain) vs " << y[i] << " (checked)";
    return os.str();
  }
  return "";
}

void copy_all(const Tensors& dst, const Tensors& src) {
  for (size_t k = 0; k < dst.size(); ++k) raw::copy_into(dst[k], src[k]);
}

}  // namespace

std::string Capture::check_against_plain(const std::function<void()>& step) {
  const Executable& p = exec_;
  const auto& code = p.instructions();
  const auto& buffers = p.buffers();
  std::vector<int> writer(buffers.size(), -1);
  bool exact = true;
  for (int i = 0; i < static_cast<int>(code.size()); ++i) {
    const Instruction& ins = code[i];
    for (const Value& v : ins.out) writer[v.buffer] = i;
    // Optimizer updates write their inputs; a region record lists every outer buffer its blocks use.
    for (size_t k = 0; k < ins.in.size(); ++k)
      if (ins.branch || writes_input(*ins.op, k)) writer[ins.in[k].buffer] = i;
    exact = exact && !order_dependent(ins);
  }
  Left left;
  for (int id = 0; id < static_cast<int>(buffers.size()); ++id) {
    const Buffer& b = buffers[id];
    if (b.kind == BufferKind::Arena || !b.written || b.bytes < itemsize(b.dtype)) continue;
    left.names.push_back(b.name);
    left.writers.push_back(writer[id]);
    left.values.push_back(whole(b, id));
    left.kept.push_back(left.values.back());
  }
  for (size_t k = 0; k < p.outputs().size(); ++k) {
    left.names.push_back("output " + std::to_string(k) + " (" + p.describe(p.outputs()[k]) + ")");
    left.writers.push_back(writer[p.outputs()[k].buffer]);
    left.values.push_back(p.output_tensors()[k]);
  }
  const Tensors before = snapshot(left.kept);
  const RngState rng = rng_state();
  auto plain_step = [&](const Tensors& into) {
    try {
      exec_.execute();
      copy_all(into, left.values);
    } catch (...) {
      restore(left.kept, before);
      set_rng_state(rng);
      throw;
    }
    restore(left.kept, before);
    set_rng_state(rng);
  };
  Tensors plain = snapshot(left.values);  // allocated before the step, so a failure leaves the state as it was
  plain_step(plain);
  // Review G9: with atomics, two plain steps differ too, and an optimizer can magnify that (Adam's
  // first update near |g| = eps); the difference a second plain step shows is allowed, per buffer.
  std::vector<double> noise(left.values.size(), 0.0);
  if (!exact) {
    Tensors again = snapshot(left.values);
    plain_step(again);
    for (size_t k = 0; k < noise.size(); ++k) noise[k] = kNoiseMargin * largest_difference(plain[k], again[k]);
  }
  exec_.poison_intermediates();  // G1: a writer missing from `step` leaves NaN, not the plain step's bytes
  step();
  for (size_t k = 0; k < left.values.size(); ++k) {
    std::string at = first_difference(plain[k], left.values[k], exact ? 0.0 : kCheckTolerance, noise[k]);
    if (at.empty()) continue;
    restore(left.kept, before);
    set_rng_state(rng);
    std::ostringstream os;
    os << left.names[k] << " differs at " << at;
    int w = left.writers[k];
    if (w >= 0) os << "; written by instruction " << w << " (" << op_name(code[w]) << ")";
    return os.str();
  }
  return "";
}

bool Capture::self_check() {
  const cuda::StreamHandle stream = cuda::current_stream_handle(exec_.device().index);
  std::string diff;
  try {
    diff = check_against_plain([&] { graph_->launch(stream); });
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::OutOfMemory) throw;
    status_ += "; self-check skipped: no memory for the snapshots it compares (" + std::string(e.what()) + ")";
    return false;
  }
  if (diff.empty()) {
    status_ += "; self-check passed (the first captured step agreed with a plain one)";
    return true;
  }
  phase_ = Phase::Off;
  graph_.reset();
  status_ = "fallback to plain execution: the capture self-check found that the captured step differs from a "
            "plain one: " + diff;
  return false;
}

}  // namespace fg::plan
