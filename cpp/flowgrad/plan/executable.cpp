// The executor (executable.h): inputs copied into their slots, then one flat loop of kernel calls
// over tensors bound once to planned memory (no shape rule, no allocation, no autograd per call),
// for the top level and every region's blocks. Lowering itself, the Executable's constructor, is
// in lower.cpp.
#include "flowgrad/plan/executable.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

#include "flowgrad/core/runtime.h"
#include "flowgrad/cuda/host_sync.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/plan/capture.h"

namespace fg::plan {
Tensor layout(const std::shared_ptr<Storage>& storage, const Value& v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->offset = v.offset;
  impl->shape = v.shape;
  impl->strides = v.strides;
  impl->dtype = v.dtype;
  return Tensor(impl);
}

namespace {

using Kernel = decltype(OpDef::cpu);

// The fallback launch: the op's kernel called with the bound tensors.
struct KernelCall {
  Kernel kernel;
  Tensors in, out;
  const Attrs* attrs;
};
void call_kernel(const void* p, const KernelEnv& env) {
  auto* c = static_cast<const KernelCall*>(p);
  c->kernel(env, c->in, c->out, *c->attrs);
}

}  // namespace

Launch prepare_launch(const OpDef& op, Device device, const Tensors& in, const Tensors& out, const Attrs& attrs) {
  PrepareFn prepare = device.is_cpu() ? op.prepare_cpu : op.prepare_cuda;
  if (prepare)
    if (Launch launch = prepare(in, out, attrs)) return launch;
  Kernel kernel = device.is_cpu() ? op.cpu : op.cuda;
  return {call_kernel, std::make_shared<KernelCall>(KernelCall{kernel, in, out, &attrs})};
}

Executable::~Executable() = default;

void Executable::bind_arena(std::shared_ptr<Storage> arena) {
  FG_CHECK(arena && arena->bytes() >= arena_bytes_ && arena->device() == device_, Value,
           "bind_arena: the plan needs ", arena_bytes_, " arena bytes on ", device_.str(), ", got ",
           arena ? std::to_string(arena->bytes()) + " bytes on " + arena->device().str() : std::string("none"));
  arena_ = std::move(arena);
  bind();
}

std::shared_ptr<Storage> Executable::slot(const Buffer& b) const {
  return Storage::wrap(static_cast<char*>(arena_->data()) + b.offset, b.bytes, device_, [arena = arena_] {});
}

void Executable::bind() {
  scratch_.device = device_;
  for (Buffer& b : buffers_)
    if (b.kind != BufferKind::External) b.storage = slot(b);
  auto tensor = [&](const Value& v) { return layout(buffers_[v.buffer].storage, v); };
  for (Instruction& ins : code_) bind_instruction(ins);
  for (const auto& branch : branches_)
    if (branch) bind_branch(*branch);
  input_t_.clear();  // the traced examples held the shapes until the first bind
  for (const Value& v : inputs_) input_t_.push_back(tensor(v));
  output_t_.clear();
  for (const Value& v : outputs_) output_t_.push_back(tensor(v));
  bind_runs();
  find_in_place_inputs();
  capture_ = std::make_shared<Capture>(*this);
}

// Which inputs can be read in place, and why the others are copied (Plan::str prints it).
void Executable::find_in_place_inputs() {
  in_place_.assign(inputs_.size(), {});
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Value& v = inputs_[i];  // the whole slot, contiguous (Plan's constructor)
    InPlaceInput& in = in_place_[i];
    auto refuse = [&](const char* why) {
      if (in.copied_because.empty()) in.copied_because = why;
    };
    if (buffers_[v.buffer].written) refuse("the step writes it");
    for (int k = 0; k < static_cast<int>(code_.size()); ++k) {
      const Instruction& ins = code_[k];
      auto here = [&](const std::vector<Value>& values) {
        return std::any_of(values.begin(), values.end(), [&](const Value& u) { return u.buffer == v.buffer; });
      };
      if (!here(ins.in) && !here(ins.out)) continue;
      if (ins.branch) refuse("a region reads it");
      if (ins.run >= 0) refuse("a fused run reads it (its launches are one per tile)");
      in.readers.push_back(k);
    }
    if (!device_.is_cpu()) refuse("a captured CUDA graph holds its slot's address");
  }
}

// A contiguous tensor, aligned as the arena's buffers are, whose bytes the step neither writes
// (parameters, gradients, state, the arena) nor reads as another input's copy.
bool Executable::reads_in_place(size_t i, const Tensor& x) const {
  const InPlaceInput& in = in_place_[i];
  if (!in.copied_because.empty() || !x.is_contiguous()) return false;
  if (in.owner == x.storage() && in.at == x.data_ptr()) return true;  // checked when it was pointed at
  const char* lo = static_cast<const char*>(x.data_ptr());
  const char* hi = lo + buffers_[inputs_[i].buffer].bytes;
  if (reinterpret_cast<uintptr_t>(lo) % 64 != 0) return false;
  auto apart = [&](const void* data, size_t bytes) {
    const char* at = static_cast<const char*>(data);
    return hi <= at || at + bytes <= lo;
  };
  if (!apart(arena_->data(), arena_->bytes())) return false;
  for (const Buffer& b : buffers_)
    if (b.kind == BufferKind::External && b.written && !apart(b.storage->data(), b.bytes)) return false;
  return true;
}

void Executable::point_input(size_t i, const Tensor& x) {
  InPlaceInput& in = in_place_[i];
  const bool caller = x.defined();
  if (caller ? in.owner == x.storage() && in.at == x.data_ptr() : !in.owner) return;
  const int id = inputs_[i].buffer;
  Buffer& b = buffers_[id];
  in.owner = caller ? x.storage() : nullptr;
  in.at = caller ? x.data_ptr() : nullptr;
  b.storage = caller ? Storage::wrap(x.data_ptr(), b.bytes, device_, [keep = x.storage()] {}) : slot(b);
  for (int k : in.readers) bind_instruction(code_[k]);
  for (size_t j = 0; j < outputs_.size(); ++j)
    if (outputs_[j].buffer == id) output_t_[j] = layout(b.storage, outputs_[j]);
}

void Executable::bind_instruction(Instruction& ins) {
  auto tensor = [&](const Value& v) { return layout(buffers_[v.buffer].storage, v); };
  ins.in_t.clear();
  ins.out_t.clear();
  for (const Value& v : ins.in) ins.in_t.push_back(tensor(v));
  for (const Value& v : ins.out) ins.out_t.push_back(tensor(v));
  if (!ins.branch) ins.launch = prepare_launch(*ins.op, device_, ins.in_t, ins.out_t, ins.attrs);
}

void Executable::load_inputs(const Tensors& inputs) {
  FG_CHECK(inputs.size() == input_t_.size(), Value, "compiled step: expected ", input_t_.size(), " input(s), got ",
           inputs.size());
  run_stats_.inputs_copied = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    const Tensor& slot = input_t_[i];
    FG_CHECK(x.shape() == slot.shape(), Shape, "compiled step: input ", i, " has shape ", to_string(x.shape()),
             ", the plan was compiled for ", to_string(slot.shape()),
             " (compile with dynamic=True to keep one plan per input shape)");
    FG_CHECK(x.dtype() == slot.dtype(), DType, "compiled step: input ", i, " is ", dtype_name(x.dtype()),
             ", the plan was compiled for ", dtype_name(slot.dtype()));
    FG_CHECK(x.device() == slot.device(), Device, "compiled step: input ", i, " is on ", x.device().str(),
             ", the plan runs on ", slot.device().str());
    if (reads_in_place(i, x)) {
      point_input(i, x);
      continue;
    }
    if (in_place_[i].owner) point_input(i, Tensor());
    raw::copy_into(slot, x);
    ++run_stats_.inputs_copied;
  }
}

std::string Executable::check_step(const Tensors& inputs, const std::function<void()>& after) {
  load_inputs(inputs);
  sync_rng();
  std::string diff = capture_->check_against_plain([&] {
    execute();
    if (after) after();
  });
  if (!diff.empty()) execute();  // the state from before both (the pair included): one step, plainly
  step_done();
  return diff;
}

Tensors Executable::run(const Tensors& inputs, std::vector<double>* ms) {
  const int64_t syncs_before = cuda::host_sync_count();
  load_inputs(inputs);
  sync_rng();
  if (ms) *ms = capture_->profile();
  else if (!capture_->try_replay()) execute();
  step_done();
  if (scratch_.peak > scratch_.capacity) {  // after the first run, or an instruction that asked for more
    scratch_block_ = Storage::allocate(scratch_.peak, device_);
    scratch_.base = scratch_block_->data();
    scratch_.capacity = scratch_.peak;
  }
  Tensors out;
  for (size_t j = 0; j < output_t_.size(); ++j) {  // fresh tensors: the next run overwrites the arena
    const Tensor& t = output_t_[j];
    if (j < viewed_outputs.size() && viewed_outputs[j]) {
      out.push_back(t);
      continue;
    }
    Tensor copy = Tensor::empty(t.shape(), t.dtype(), t.device());
    raw::copy_into(copy, t);
    out.push_back(copy);
  }
  run_stats_.host_syncs = cuda::host_sync_count() - syncs_before;
  return out;
}

// On CUDA the write is a copy queued before the step's kernels, from pinned staging (no host wait); a step that threw
// leaves philox_holds_ at what was written, so the next run writes again if it moved.
void Executable::sync_rng() {
  if (philox_ < 0) {  // nothing to write; the generator still moves on as an eager step moves it
    if (rng_advance_ > 0) rng_reserve(static_cast<uint64_t>(rng_advance_));
    return;
  }
  const RngState want{rng_state().seed, rng_reserve(static_cast<uint64_t>(rng_advance_))};
  if (philox_holds_ && philox_holds_->seed == want.seed && philox_holds_->offset == want.offset) return;
  const uint64_t pair[2] = {want.seed, want.offset};
  void* at = buffers_[philox_].storage->data();
  if (device_.is_cpu()) std::memcpy(at, pair, sizeof pair);
  else cuda::copy_to_device_async(at, device_, pair, sizeof pair);
  philox_holds_ = want;
  ++run_stats_.philox_writes;
}

void Executable::step_done() {
  if (philox_holds_) philox_holds_->offset += static_cast<uint64_t>(rng_advance_);
}

// One step: the top-level instructions through run_code, on the plan's device with its scratch
// installed; counts the storages the kernels allocate (their temporaries come from the scratch
// once it is measured).
void Executable::execute(const std::function<void(int)>* progress) {
  std::optional<cuda::DeviceGuard> on_device;  // kernels launch on the plan's device, whichever thread runs it
  if (device_.is_cuda()) on_device.emplace(device_.index);
  const uint64_t allocations_before = storage_allocations();
  run_stats_.allocating.clear();
  // The one env of this run: the current stream of the plan's device (a capture makes its
  // capture stream current) and the plan's scratch.
  env_ = current_env(device_);
  env_.scratch = &scratch_;
  for (const auto& branch : branches_)
    if (branch) branch->taken = -1;
  run_code(code_, progress);
  run_stats_.allocations = storage_allocations() - allocations_before;
}

// The one instruction loop, for the top level and every region's blocks (branch.cpp): prepared
// launches in order, a fused run at its first instruction, a region's chosen blocks; the kernel
// scratch is reset before each, and `progress(i)` is called before each (capture.cpp). A top-level
// instruction that allocated (its blocks included) is listed in run_stats().allocating.
void Executable::run_code(std::vector<Instruction>& code, const std::function<void(int)>* progress) {
  const bool top = &code == &code_;
  for (int i = 0; i < static_cast<int>(code.size()); ++i) {
    Instruction& ins = code[i];
    if (progress) (*progress)(i);
    const uint64_t before = storage_allocations();
    scratch_.used = 0;
    if (ins.branch)
      run_branch(ins);
    else if (ins.run < 0)
      ins.launch.run(ins.launch.args.get(), env_);
    else if (i == runs_[ins.run].first)
      execute_run(runs_[ins.run]);
    if (top && storage_allocations() != before) run_stats_.allocating.push_back(i);
    // A fused run's buffers are released once its last instruction has run.
    if (poison_ && (ins.run < 0 || i == runs_[ins.run].last))
      for (int k = ins.run < 0 ? i : runs_[ins.run].first; k <= i; ++k) poison(code[k].released);
  }
}

Tensors snapshot(const Tensors& tensors) {
  Tensors copies;
  for (const Tensor& t : tensors) {
    Tensor copy = Tensor::empty(t.shape(), t.dtype(), t.device());
    raw::copy_into(copy, t);
    copies.push_back(copy);
  }
  return copies;
}

void restore(const Tensors& tensors, const Tensors& copies) {
  FG_CHECK(tensors.size() == copies.size(), Value, "restore: ", copies.size(), " copies for ", tensors.size(), " tensors");
  for (size_t i = 0; i < tensors.size(); ++i) raw::copy_into(tensors[i], copies[i]);
}

void Executable::poison_intermediates() {
  std::vector<std::pair<int64_t, int64_t>> arena, inputs;  // [start, end) bytes of the arena
  for (const Buffer& b : buffers_) {
    if (b.local || b.bytes == 0) continue;
    const std::pair<int64_t, int64_t> range{b.offset, b.offset + static_cast<int64_t>(b.bytes)};
    if (b.kind == BufferKind::Arena) arena.push_back(range);
    if (b.kind == BufferKind::Input) inputs.push_back(range);
  }
  std::sort(arena.begin(), arena.end());
  std::sort(inputs.begin(), inputs.end());
  auto fill = [&](const std::shared_ptr<Storage>& storage, int64_t start, int64_t end) {
    if (end <= start) return;
    raw::fill(layout(storage, {-1, start, Dims{end - start}, Dims{1}, DType::UInt8}), 255.0);
    run_stats_.poisoned_bytes += static_cast<size_t>(end - start);
  };
  int64_t done = 0;  // arena bytes below this are poisoned or an input's
  for (auto [start, end] : arena) {
    start = std::max(start, done);
    for (auto [in_start, in_end] : inputs) {  // the parts of [start, end) outside every input slot
      if (in_end <= start || in_start >= end) continue;
      fill(arena_, start, in_start);
      start = std::max(start, in_end);
    }
    fill(arena_, start, end);
    done = std::max(done, end);
  }
  if (scratch_block_) fill(scratch_block_, 0, static_cast<int64_t>(scratch_.capacity));
}

// FLOWGRAD_DEBUG_PLAN: buffers whose last use has run are filled with NaN, so a read after reuse
// shows up at once.
void Executable::poison(const std::vector<int>& released) {
  for (int id : released) {
    const Buffer& b = buffers_[id];
    if (!is_floating(b.dtype) || b.bytes < itemsize(b.dtype)) continue;
    int64_t n = static_cast<int64_t>(b.bytes / itemsize(b.dtype));
    run_stats_.poisoned_bytes += static_cast<size_t>(n) * itemsize(b.dtype);
    raw::fill(layout(b.storage, {id, 0, Dims{n}, Dims{1}, b.dtype}), std::numeric_limits<double>::quiet_NaN());
  }
}

std::string Executable::describe(const Value& v) const {
  std::ostringstream os;
  os << buffers_[v.buffer].name;
  bool whole = v.offset == 0 && v.strides == contiguous_strides(v.shape) &&
               static_cast<size_t>(v.shape.numel()) * itemsize(v.dtype) == buffers_[v.buffer].bytes;
  if (!whole) os << "[view offset " << v.offset << " strides " << to_string(v.strides) << "]";
  return os.str();
}

}  // namespace fg::plan
