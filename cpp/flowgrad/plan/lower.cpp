// Lowering: a Program after the passes becomes an Executable that can run. CUDA fused runs get
// their generated kernels compiled with NVRTC here (a run that fails to compile is unfused in the
// program, before memory is planned); the memory plan is made and checked; buffers get their
// memory (externals the traced storage, declared gradients a fresh tensor set as the parameter's
// .grad); instructions are flattened into the executor's records, a fused run as its calls
// marked with the run, a region as one record holding its lowered blocks.
#include <algorithm>
#include <chrono>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/core/env.h"
#include "flowgrad/plan/capture.h"
#include "flowgrad/plan/plan.h"

namespace fg::plan {
namespace {

// Why fused runs cannot be used ("not used: ..."), else "" and the architecture of the plan's
// device (not of whichever device is current) in *arch.
std::string cuda_fusion_blocker(int device, int* arch) {
  std::string why = cuda_fusion_unavailable();
  if (!why.empty()) return "not used: " + why;
  try {
    *arch = cuda_arch(device);
  } catch (const Error& e) {
    return std::string("not used: ") + e.what();
  }
  return "";
}

Value whole(const BufferDecl& b, int id) {
  return {id, 0, Dims{static_cast<int64_t>(b.bytes / itemsize(b.dtype))}, Dims{1}, b.dtype};
}

void unfuse_into(Instr& run, Block& out) {
  for (Instr& call : run.blocks[0]) out.push_back(std::move(call));
}

int64_t count_of(const std::vector<std::tuple<std::string, int64_t, int64_t>>& passes, const std::string& name) {
  for (const auto& [pass, before, after] : passes)
    if (pass == name) return before - after;
  return 0;
}

}  // namespace

// Fused runs at any depth, in program order (lower_block takes kernels_ in the same order).
void Plan::compile_cuda_runs(Program& p, Binding& binding) {
  if (!env::plan_fusion()) return;
  int arch = 0;
  std::string target;  // what NVRTC made: "CUBIN for sm_90", ...
  const int device = p.device.index;
  const std::string blocker = cuda_fusion_blocker(device, &arch);
  auto& kernels = binding.kernels;
  const std::vector<bool> local = fused_locals(p, def_use(p));
  auto compile = [&](auto& self, Block& code) -> void {
    Block out;
    for (Instr& ins : code) {
      if (is_region(ins.kind))
        for (Block& b : ins.blocks) self(self, b);
      if (ins.kind != InstrKind::Fused) {
        out.push_back(std::move(ins));
        continue;
      }
      if (!blocker.empty()) {
        unfuse_into(ins, out);
        continue;
      }
      try {
        FusedKernel kernel = plan::fused_kernel(p, ins, local, "fg_fused_" + std::to_string(kernels.size()));
        FusedBinary binary = compile_fused(kernel.source, kernel.name, arch);
        binding.loaded.push_back(load_fused(device, kernel, binary));
        kernels.push_back(std::move(kernel));
        target = binary.target;
        out.push_back(std::move(ins));
      } catch (const Error& e) {  // its ops launch one by one; the reason goes to step.stats
        binding.cuda_fusion = e.what();
        unfuse_into(ins, out);
      }
    }
    code = std::move(out);
  };
  compile(compile, p.body);
  if (!blocker.empty()) {
    binding.cuda_fusion = blocker;
    return;
  }
  binding.cuda_fusion = std::to_string(kernels.size()) + " fused run(s) compiled with NVRTC (" +
                        (target.empty() ? "none" : target) + ")" +
                        (binding.cuda_fusion.empty() ? "" : "; " + binding.cuda_fusion);
}

void Plan::lower(Program program, Binding binding, const PlanSpec& spec) {
  auto start = std::chrono::steady_clock::now();
  auto lap = [&](const char* stage) {  // Plan::pass_ms
    auto now = std::chrono::steady_clock::now();
    pass_ms_.emplace_back(stage, std::chrono::duration<double, std::milli>(now - std::exchange(start, now)).count());
  };
  stats_.common = static_cast<int>(count_of(passes_, "cse"));
  stats_.folded = static_cast<int>(count_of(passes_, "constant folding"));
  stats_.eliminated = static_cast<int>(count_of(passes_, "dead code"));
  stats_.transposes = static_cast<int>(count_of(passes_, "transpose folding"));
  stats_.branches = program.regions;
  if (program.device.is_cuda()) compile_cuda_runs(program, binding);
  memory_ = plan_memory(program, def_use(program), env::plan_planner());
  plan::check_memory(program, memory_);
  lap("memory");
  stats_.arena_bytes = memory_.arena_bytes;
  stats_.naive_bytes = memory_.naive_bytes;
  binding.storages.resize(program.buffers.size());
  if (program.philox >= 0)  // written before the first run (Executable::sync_rng)
    binding.storages[program.philox] = Storage::allocate(program.buffers[program.philox].bytes, program.device);
  for (size_t k = 0; k < program.grads.size(); ++k) {
    const Tensor& param = spec.grads[k].first;
    // Another plan's gradient tensor when it fits (plans of one dynamic step share one set), else a new one.
    Tensor target = k < spec.grad_targets.size() ? spec.grad_targets[k] : Tensor();
    if (!target.defined() || target.shape() != param.shape() || target.dtype() != param.dtype() ||
        target.device() != param.device() || !target.is_contiguous() || target.offset() != 0 ||
        target.storage()->bytes() != static_cast<size_t>(target.numel()) * itemsize(target.dtype()))
      target = Tensor::empty(param.shape(), param.dtype(), param.device());
    binding.storages[program.grads[k].target] = target.storage();
    set_grad(param, target);
  }
  walk(program.body, [&](const Instr& ins, int) {
    if (ins.kind == InstrKind::Fused) stats_.fused += static_cast<int>(ins.blocks[0].size());
  });
  std::get<2>(passes_.back()) = count_kernels(program.body);  // after CUDA runs that failed to compile
  exec_ = std::make_unique<Executable>(program, memory_, std::move(binding));
  program_ = std::move(program);
  lap("bind");
}

Executable::Executable(const Program& program, const MemoryPlan& memory, Binding binding)
    : device_(program.device), inputs_(program.inputs), outputs_(program.outputs),
      arena_bytes_(memory.arena_bytes), philox_(program.philox), rng_advance_(program.rng_advance),
      poison_(binding.poison) {
  run_stats_.cuda_fusion = binding.cuda_fusion;
  const DefUse du = def_use(program);
  for (size_t id = 0; id < program.buffers.size(); ++id) {
    Buffer b{program.buffers[id]};
    if (b.kind == BufferKind::External) b.storage = binding.storages[id];
    b.first = memory.first[id], b.last = memory.last[id], b.offset = memory.offset[id];
    b.written = du.written(static_cast<int>(id));
    b.local = memory.local[id];
    b.takes = memory.takes[id];
    buffers_.push_back(std::move(b));
  }
  for (const GradDecl& g : program.grads) buffers_[g.target].written = true;
  branches_.resize(program.regions);
  int time = 0;
  lower_block(program.body, code_, time, memory, binding);
  arena_ = Storage::allocate(std::max<size_t>(arena_bytes_, 1), device_);
  bind();
}

void Executable::lower_block(const Block& block, std::vector<Instruction>& out, int& time, const MemoryPlan& memory,
                             const Binding& binding) {
  for (const Instr& ins : block) {
    if (ins.kind == InstrKind::Call) {
      out.push_back({ins.op, ins.attrs, ins.in, ins.out, ins.phase, ins.origin});
      out.back().released = memory.released[time++];
      continue;
    }
    const int entry = time++;
    if (ins.kind == InstrKind::Fused) {
      FusedRun run;
      run.first = static_cast<int>(out.size());
      run.last = run.first + static_cast<int>(ins.blocks[0].size()) - 1;
      run.shape = ins.blocks[0][0].out[0].shape;
      run.split = ins.split;
      run.code = &out;
      lower_block(ins.blocks[0], out, time, memory, binding);
      for (int k = run.first; k <= run.last; ++k) {
        out[k].run = static_cast<int>(runs_.size());
        if (memory.local[out[k].out[0].buffer]) run.local.push_back(out[k].out[0].buffer);
      }
      for (int t : {entry, time++})
        out.back().released.insert(out.back().released.end(), memory.released[t].begin(), memory.released[t].end());
      if (device_.is_cuda()) run.kernel = binding.kernels[runs_.size()], run.loaded = binding.loaded[runs_.size()];
      runs_.push_back(std::move(run));
      continue;
    }
    auto br = std::make_shared<Branch>();
    static_cast<Region&>(*br) = ins.region;
    br->kind = static_cast<BranchKind>(static_cast<int>(ins.kind) - static_cast<int>(InstrKind::Switch));
    br->blocks.resize(ins.blocks.size());
    for (size_t b = 0; b < ins.blocks.size(); ++b) lower_block(ins.blocks[b], br->blocks[b], time, memory, binding);
    Instruction record{nullptr, {}};
    record.phase = ins.phase;
    record.origin = ins.origin;
    record.branch = br;
    std::vector<bool> listed(buffers_.size(), false);
    for (int id : br->owned) listed[id] = true, record.out.push_back(whole(buffers_[id], id));
    reads_deep(ins, [&](const Value& v) {
      if (!listed[v.buffer]) listed[v.buffer] = true, record.in.push_back(whole(buffers_[v.buffer], v.buffer));
    });
    for (int t : {entry, time++}) record.released.insert(record.released.end(), memory.released[t].begin(), memory.released[t].end());
    branches_[br->id] = br;
    out.push_back(std::move(record));
  }
}

void Plan::check_memory() const { plan::check_memory(program_, memory_); }

FusedKernel Plan::fused_kernel(int run, const std::string& name) const {
  const Instr* found = nullptr;
  int k = 0;
  walk(program_.body, [&](const Instr& ins, int) {
    if (ins.kind == InstrKind::Fused && k++ == run) found = &ins;
  });
  if (found) return plan::fused_kernel(program_, *found, memory_.local, name);
  fail(ErrorKind::Index, "fused_kernel: run ", run, " of a plan with ", runs().size(), " fused run(s)");
}

}  // namespace fg::plan
