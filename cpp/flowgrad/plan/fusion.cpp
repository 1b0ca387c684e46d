// Fused runs on the CPU (passes/fuse_elementwise.cpp forms them): every op of the run on tile 0,
// then on tile 1, ... with the tiles spread over the CPU pool. Values that live only inside the
// run never touch the arena: each worker keeps them in a tile-sized scratch that stays in cache.
// The ops' own kernels compute each tile, so a fused run computes exactly what the unfused ops
// do. Tile 1 of an early op runs after tile 0 of a late one, so every buffer a run touches stays
// alive for the whole run (analysis.cpp: a fused run spans). Also the CUDA fallback of a run
// whose generated kernel failed to launch.
#include <algorithm>

#include "flowgrad/ops/raw.h"
#include "flowgrad/plan/passes/passes.h"
#include "flowgrad/plan/executable.h"
#include "flowgrad/base/parallel.h"

namespace fg::plan {
namespace {

constexpr int64_t kTile = 1 << 14;  // elements per tile: a few operands stay in L2

}  // namespace

// A CUDA run whose kernel failed to launch runs as its ops from now on. Its local values get
// bytes of their own outside the arena (they have none in it; as External buffers a later
// bind_arena leaves them there), its ops' launches are bound again, and the reason goes to
// step.stats.
void Executable::unfuse(FusedRun& run, const std::string& why) {
  for (int b : run.local) {
    buffers_[b].storage = Storage::allocate(std::max<size_t>(buffers_[b].bytes, 1), device_);
    buffers_[b].kind = BufferKind::External;
  }
  for (int k = run.first; k <= run.last; ++k) {
    (*run.code)[k].run = -1;
    bind_instruction((*run.code)[k]);
  }
  run.launch = {};
  run_stats_.cuda_fusion += "; instructions " + std::to_string(run.first) + ".." + std::to_string(run.last) +
                        " fell back to unfused launches: " + why;
}

// Tile tensors for every op of every run: workers own contiguous ranges of tiles and one
// scratch each, so the tensors and launches are built once here and the executor only launches.
void Executable::bind_runs() {
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
          const Instruction& ins = (*run.code)[i];
          TileCall call;
          for (const Value& v : ins.in) call.in.push_back(tile_of(v, t, w));
          for (const Value& v : ins.out) call.out.push_back(tile_of(v, t, w));
          call.launch = prepare_launch(*ins.op, device_, call.in, call.out, ins.attrs);
          run.tiles[t].push_back(std::move(call));
        }
  }
}

void Executable::execute_run(FusedRun& run) {
  if (run.launch) {  // CUDA: one generated kernel
    try {
      return run.launch.run(run.launch.args.get(), env_);
    } catch (const Error& e) {
      unfuse(run, e.what());
    }
    const Launch& first = (*run.code)[run.first].launch;
    return first.run(first.args.get(), env_);  // the loop runs the rest
  }
  struct Tiles {
    const FusedRun& run;
    const KernelEnv& env;
  } tiles_of{run, env_};
  detail::run_tasks(run.workers, [](void* p, int w) {
    const auto& [r, env] = *static_cast<const Tiles*>(p);
    int64_t tiles = static_cast<int64_t>(r.tiles.size());
    for (int64_t t = tiles * w / r.workers; t < tiles * (w + 1) / r.workers; ++t)
      for (const TileCall& call : r.tiles[t]) call.launch.run(call.launch.args.get(), env);
  }, &tiles_of);
}

}  // namespace fg::plan
