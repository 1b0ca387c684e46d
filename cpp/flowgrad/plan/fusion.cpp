// Elementwise fusion (CPU plans): a run of consecutive elementwise instructions that write the
// same shape executes tile by tile — every op of the run on tile 0, then on tile 1, ... — with
// the tiles spread over the CPU pool. A tile is a range of rows, a row being what is left of the
// shape after its leading `split` dims. Each operand either spans those leading dims (its tile
// is a slice) or is broadcast over all of them (a bias row, a scalar: its tile is all of it), so
// a bias add joins the run instead of ending it. Values that live only inside the run never
// touch the arena: each worker keeps them in a tile-sized scratch that stays in cache. The ops'
// own kernels compute each tile, so a fused run computes exactly what the unfused ops do.
//
// Elementwise ops write element i from element i of their broadcast inputs, so running them
// tile by tile is exact as long as no instruction reads a value the run writes through another
// layout; such a read ends the run. Tile 1 of an early op runs after tile 0 of a late one, so
// every buffer a run touches stays alive for the whole run (memory.cpp).
#include <algorithm>

#include "flowgrad/core/env.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/plan/plan.h"
#include "flowgrad/base/parallel.h"

namespace fg::plan {
namespace {

constexpr int64_t kTile = 1 << 14;      // elements per tile: a few operands stay in L2
constexpr int64_t kMinFused = 1 << 13;  // shorter buffers gain nothing from tiling

bool whole(const Value& v, const Buffer& b, const Dims& shape) {
  return v.offset == 0 && v.shape == shape && v.strides == contiguous_strides(shape) &&
         static_cast<size_t>(shape.numel()) * itemsize(v.dtype) == b.bytes;
}

// Leading dims of `shape` that v has at full size and that merge into one stride.
int spanned_dims(const Value& v, const Dims& shape) {
  if (v.shape.size() != shape.size()) return 0;
  int k = 0;
  while (k < shape.size() && v.shape[k] == shape[k] && (k == 0 || v.strides[k - 1] == v.strides[k] * v.shape[k])) ++k;
  return k;
}

// Leading dims of `shape` that v is broadcast over (absent or of size 1).
int broadcast_dims(const Value& v, const Dims& shape) {
  int lead = shape.size() - v.shape.size(), k = 0;
  while (k < shape.size() && (k < lead || v.shape[k - lead] == 1)) ++k;
  return k;
}

// Why fused CUDA runs cannot be used ("not used: ..."), else "" and the architecture of the plan's
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

}  // namespace

// How many leading dims of `shape` the instruction can be tiled over (0: it cannot join a run
// writing `shape`).
int Plan::fusable_split(const Instruction& ins, const Dims& shape) const {
  if (!ins.op->in(Group::Elementwise) || ins.out.size() != 1 || shape.size() == 0 || shape.numel() == 0) return 0;
  const Value& out = ins.out[0];
  const Buffer& b = buffers_[out.buffer];
  if ((device_.is_cpu() && shape.numel() < kMinFused) || b.kind != BufferKind::Arena || !whole(out, b, shape)) return 0;
  int split = shape.size();
  for (const Value& v : ins.in) split = std::min(split, std::max(spanned_dims(v, shape), broadcast_dims(v, shape)));
  return split;
}

void Plan::fuse() {
  if (!env::plan_fusion()) return;
  const bool cuda = !device_.is_cpu();
  int arch = 0;
  std::string target;  // what NVRTC made: "CUBIN for sm_90", ...
  if (cuda && !(stats_.cuda_fusion = cuda_fusion_blocker(device_.index, &arch)).empty()) return;
  const int end = static_cast<int>(code_.size());
  for (int i = 0; i < end;) {
    const Dims shape = code_[i].out.empty() ? Dims{} : code_[i].out[0].shape;
    int split = fusable_split(code_[i], shape);
    std::vector<bool> written(buffers_.size(), false), read(buffers_.size(), false);
    auto join = [&](const Instruction& ins) {
      for (const Value& v : ins.in) read[v.buffer] = true;
      written[ins.out[0].buffer] = true;
    };
    if (split > 0) join(code_[i]);
    int j = i;
    while (split > 0 && j + 1 < end) {
      const Instruction& next = code_[j + 1];
      int s = fusable_split(next, shape);
      bool exact = s > 0 && !read[next.out[0].buffer];
      for (const Value& v : next.in) exact &= !written[v.buffer] || whole(v, buffers_[v.buffer], shape);
      if (!exact) break;
      split = std::min(split, s);
      join(next);
      ++j;
    }
    if (split == 0 || j == i) {
      i = j + 1;
      continue;
    }
    FusedRun run;
    run.first = i, run.last = j, run.shape = shape, run.split = split;
    // Values made inside the run and read nowhere else stay in per-tile scratch.
    std::vector<bool> outside(buffers_.size(), false);
    for (int k = 0; k < end; ++k) {
      if (k >= i && k <= j) continue;
      for (const auto* values : {&code_[k].in, &code_[k].out})
        for (const Value& v : *values) outside[v.buffer] = true;
    }
    for (const Value& v : outputs_) outside[v.buffer] = true;
    for (int k = i; k <= j; ++k) {
      int b = code_[k].out[0].buffer;
      if (!outside[b] && !buffers_[b].local) {
        buffers_[b].local = true;
        run.local.push_back(b);
      }
    }
    for (int k = i; k <= j; ++k) code_[k].run = static_cast<int>(runs_.size());
    runs_.push_back(std::move(run));
    if (cuda && !compile_cuda_run(arch, target)) {
      i = j + 1;
      continue;
    }
    stats_.fused += j - i + 1;
    i = j + 1;
  }
  if (cuda) stats_.cuda_fusion = std::to_string(runs_.size()) + " fused run(s) compiled with NVRTC (" +
                                 (target.empty() ? "none" : target) + ")" +
                                 (stats_.cuda_fusion.empty() ? "" : "; " + stats_.cuda_fusion);
}

// Generates, compiles and loads the kernel of the last run formed; on any failure the run is
// undone (its ops launch one by one) and the reason kept for step.stats.
bool Plan::compile_cuda_run(int arch, std::string& target) {
  FusedRun& run = runs_.back();
  int index = static_cast<int>(runs_.size()) - 1;
  try {
    run.kernel = fused_kernel(index, "fg_fused_" + std::to_string(index));
    FusedBinary binary = compile_fused(run.kernel.source, run.kernel.name, arch);
    run.loaded = load_fused(device_.index, run.kernel, binary);
    target = binary.target;
    return true;
  } catch (const Error& e) {
    stats_.cuda_fusion = e.what();
  }
  for (int b : run.local) buffers_[b].local = false;
  for (int k = run.first; k <= run.last; ++k) code_[k].run = -1;
  runs_.pop_back();
  return false;
}

// A CUDA run whose kernel failed to launch runs as its ops from now on. Its local values get
// bytes of their own (they have none in the arena), its ops' launches are bound again, and the
// reason goes to step.stats.
void Plan::unfuse(FusedRun& run, const std::string& why) {
  for (int b : run.local) buffers_[b].storage = Storage::allocate(std::max<size_t>(buffers_[b].bytes, 1), device_);
  for (int k = run.first; k <= run.last; ++k) {
    code_[k].run = -1;
    bind_instruction(code_[k]);
  }
  run.launch = {};
  stats_.cuda_fusion += "; instructions " + std::to_string(run.first) + ".." + std::to_string(run.last) +
                        " fell back to unfused launches: " + why;
}

// Tile tensors for every op of every run: workers own contiguous ranges of tiles and one
// scratch each, so the tensors and launches are built once here and the executor only launches.
void Plan::bind_runs() {
  if (!device_.is_cpu()) {
    for (FusedRun& run : runs_) {
      std::vector<void*> pointers;
      for (int b : run.kernel.params) pointers.push_back(buffers_[b].storage->data());
      run.launch = bind_fused(run.loaded, run.kernel, pointers);
    }
    return;
  }
  for (FusedRun& run : runs_) {
    const Dims& shape = run.shape;
    const int k = run.split, rank = shape.size();
    const int64_t rows = raw::span(shape, 0, k), row = raw::span(shape, k, rank);
    const int64_t rows_per_tile = std::max<int64_t>(1, kTile / std::max<int64_t>(row, 1));
    const int64_t tiles = (rows + rows_per_tile - 1) / rows_per_tile;
    run.workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(pool_threads(), tiles)));
    std::vector<int64_t> scratch_offset(buffers_.size(), 0);
    int64_t scratch_bytes = 0;
    for (int b : run.local) {
      scratch_offset[b] = scratch_bytes;
      scratch_bytes += (static_cast<int64_t>(rows_per_tile * row * itemsize(buffers_[b].dtype)) + 63) / 64 * 64;
    }
    std::vector<std::shared_ptr<Storage>> scratch;
    for (int w = 0; w < run.workers; ++w) scratch.push_back(Storage::allocate(std::max<int64_t>(scratch_bytes, 1), device_));
    auto tile_of = [&](const Value& v, int64_t t, int w) {
      const int64_t begin = t * rows_per_tile, len = std::min(rows_per_tile, rows - begin);
      const Buffer& b = buffers_[v.buffer];
      Value tile{v.buffer, v.offset, Dims{len}, Dims{0}, v.dtype};
      if (b.local || spanned_dims(v, shape) >= k) {  // rows [begin, begin + len) of v
        tile.strides[0] = v.strides[k - 1];
        tile.offset += begin * v.strides[k - 1];
        for (int d = k; d < rank; ++d) tile.shape.push_back(v.shape[d]), tile.strides.push_back(v.strides[d]);
      } else {  // broadcast over the rows: all of v, less its leading size-1 dims
        tile.shape = Dims{}, tile.strides = Dims{};
        for (int d = std::max(0, k - (rank - v.shape.size())); d < v.shape.size(); ++d)
          tile.shape.push_back(v.shape[d]), tile.strides.push_back(v.strides[d]);
      }
      if (!b.local) return layout(b.storage, tile);
      auto slot = Storage::wrap(static_cast<char*>(scratch[w]->data()) + scratch_offset[v.buffer],
                                static_cast<size_t>(len * row) * itemsize(v.dtype), device_, [keep = scratch[w]] {});
      tile.offset = 0;
      tile.strides = contiguous_strides(tile.shape);
      return layout(slot, tile);
    };
    run.tiles.assign(tiles, {});
    for (int w = 0; w < run.workers; ++w)
      for (int64_t t = tiles * w / run.workers; t < tiles * (w + 1) / run.workers; ++t)
        for (int i = run.first; i <= run.last; ++i) {
          TileCall call;
          for (const Value& v : code_[i].in) call.in.push_back(tile_of(v, t, w));
          for (const Value& v : code_[i].out) call.out.push_back(tile_of(v, t, w));
          call.launch = prepare_launch(*code_[i].op, device_, call.in, call.out, code_[i].attrs, false);
          run.tiles[t].push_back(std::move(call));
        }
  }
}

void Plan::execute_run(FusedRun& run) {
  if (run.launch) {  // CUDA: one generated kernel
    try {
      return run.launch.run(run.launch.args.get());
    } catch (const Error& e) {
      unfuse(run, e.what());
    }
    return code_[run.first].launch.run(code_[run.first].launch.args.get());  // the loop runs the rest
  }
  detail::run_tasks(run.workers, [](void* p, int w) {
    const FusedRun& r = *static_cast<const FusedRun*>(p);
    int64_t tiles = static_cast<int64_t>(r.tiles.size());
    for (int64_t t = tiles * w / r.workers; t < tiles * (w + 1) / r.workers; ++t)
      for (const TileCall& call : r.tiles[t]) call.launch.run(call.launch.args.get());
  }, &run);
}

}  // namespace fg::plan
