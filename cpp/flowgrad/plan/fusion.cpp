// Elementwise fusion (CPU plans): a run of consecutive elementwise instructions over buffers of
// the same length executes tile by tile — every op of the run on tile 0, then on tile 1, ... —
// with the tiles spread over the CPU pool. Values that live only inside the run never touch
// the arena: each worker keeps them in a tile-sized scratch that stays in cache. The ops'
// own kernels compute each tile, so a fused run computes exactly what the unfused ops do.
//
// Elementwise ops read element i of their inputs to write element i of their output, so
// running them tile by tile is exact when every operand is a whole contiguous buffer of the
// run's length (or a one-element scalar); anything else (broadcast rows, strided views, an
// offset into a buffer) ends the run.
#include <algorithm>

#include "flowgrad/core/env.h"
#include "flowgrad/plan/plan.h"
#include "kernels/common/parallel.h"

namespace fg::plan {
namespace {

constexpr int64_t kTile = 1 << 14;      // elements per tile: a few operands stay in L2
constexpr int64_t kMinFused = 1 << 13;  // shorter buffers gain nothing from tiling

bool whole(const Value& v, const Buffer& b, int64_t n) {
  return v.offset == 0 && v.shape.numel() == n && v.strides == contiguous_strides(v.shape) &&
         static_cast<size_t>(n) * itemsize(v.dtype) == b.bytes;
}

}  // namespace

// The run length an instruction can join (its output's element count), or -1.
int64_t Plan::fusable_length(const Instruction& ins) const {
  if (!(ins.op->flags & kFusable) || ins.out.size() != 1) return -1;
  const Value& out = ins.out[0];
  int64_t n = out.shape.numel();
  if (n < kMinFused || buffers_[out.buffer].kind != BufferKind::Arena || !whole(out, buffers_[out.buffer], n)) return -1;
  for (const Value& v : ins.in) {
    bool scalar = v.shape.numel() == 1;
    if (!scalar && (v.shape != out.shape || !whole(v, buffers_[v.buffer], n))) return -1;
  }
  return n;
}

void Plan::fuse() {
  if (!device_.is_cpu() || !env::plan_fusion()) return;
  const int end = static_cast<int>(code_.size());
  for (int i = 0; i < end;) {
    int64_t n = fusable_length(code_[i]);
    int j = i;
    while (n > 0 && j + 1 < end && fusable_length(code_[j + 1]) == n) ++j;
    if (n < 0 || j == i) {
      i = j + 1;
      continue;
    }
    FusedRun run{i, j, n};
    // Values made inside the run and read nowhere else stay in per-tile scratch.
    std::vector<bool> inside(buffers_.size(), false), outside(buffers_.size(), false);
    for (int k = i; k <= j; ++k) inside[code_[k].out[0].buffer] = true;
    for (int k = 0; k < end; ++k) {
      if (k >= i && k <= j) continue;
      for (const auto* values : {&code_[k].in, &code_[k].out})
        for (const Value& v : *values) outside[v.buffer] = true;
    }
    for (const Value& v : outputs_) outside[v.buffer] = true;
    for (int k = i; k <= j; ++k) {
      int b = code_[k].out[0].buffer;
      if (inside[b] && !outside[b] && !buffers_[b].local) {
        buffers_[b].local = true;
        run.local.push_back(b);
      }
    }
    for (int k = i; k <= j; ++k) code_[k].run = static_cast<int>(runs_.size());
    runs_.push_back(std::move(run));
    stats_.fused += j - i + 1;
    i = j + 1;
  }
}

// Tile tensors for every op of every run: workers own contiguous ranges of tiles and one
// scratch each, so the tensors are built once here and the executor only calls kernels.
void Plan::bind_runs() {
  for (FusedRun& run : runs_) {
    int64_t tiles = (run.numel + kTile - 1) / kTile;
    run.workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(pool_threads(), tiles)));
    std::vector<int64_t> scratch_offset(buffers_.size(), 0);
    int64_t scratch_bytes = 0;
    for (int b : run.local) {
      scratch_offset[b] = scratch_bytes;
      scratch_bytes += (static_cast<int64_t>(kTile * itemsize(buffers_[b].dtype)) + 63) / 64 * 64;
    }
    std::vector<std::shared_ptr<Storage>> scratch;
    for (int w = 0; w < run.workers; ++w) scratch.push_back(Storage::allocate(std::max<int64_t>(scratch_bytes, 1), device_));
    auto tile_of = [&](const Value& v, int64_t t, int w) {
      if (v.shape.numel() == 1 && run.numel > 1) return layout(buffers_[v.buffer].storage, {v.buffer, v.offset, Dims{}, Dims{}, v.dtype});
      int64_t begin = t * kTile, len = std::min(kTile, run.numel - begin);
      const Buffer& b = buffers_[v.buffer];
      if (!b.local) return layout(b.storage, {v.buffer, begin, Dims{len}, Dims{1}, v.dtype});
      auto slot = Storage::wrap(static_cast<char*>(scratch[w]->data()) + scratch_offset[v.buffer],
                                static_cast<size_t>(len) * itemsize(v.dtype), device_, [keep = scratch[w]] {});
      return layout(slot, {v.buffer, 0, Dims{len}, Dims{1}, v.dtype});
    };
    run.tiles.assign(tiles, {});
    for (int w = 0; w < run.workers; ++w)
      for (int64_t t = tiles * w / run.workers; t < tiles * (w + 1) / run.workers; ++t)
        for (int k = run.first; k <= run.last; ++k) {
          TileCall call;
          for (const Value& v : code_[k].in) call.in.push_back(tile_of(v, t, w));
          for (const Value& v : code_[k].out) call.out.push_back(tile_of(v, t, w));
          run.tiles[t].push_back(std::move(call));
        }
  }
}

void Plan::execute_run(FusedRun& run) {
  struct Ctx {
    Plan* plan;
    FusedRun* run;
  } ctx{this, &run};
  detail::run_tasks(run.workers, [](void* p, int w) {
    auto* c = static_cast<Ctx*>(p);
    FusedRun& r = *c->run;
    int64_t tiles = static_cast<int64_t>(r.tiles.size());
    for (int64_t t = tiles * w / r.workers; t < tiles * (w + 1) / r.workers; ++t)
      for (int k = r.first; k <= r.last; ++k) {
        const Instruction& ins = c->plan->code_[k];
        const TileCall& call = r.tiles[t][k - r.first];
        ins.op->cpu(call.in, call.out, ins.attrs);
      }
  }, &ctx);
}

}  // namespace fg::plan
