// Host waits on the GPU, counted per thread, so that "no host sync per step" is a claim a test
// can check (fg.cuda.sync_count, step.stats["host_syncs"]). Every place flowgrad blocks the host
// until device work finishes (reads to the host, stream/event/device synchronize, the device
// error check that follows them) goes through cuda::host_wait (scope.cuh), which counts here.
// Plain C++: CPU-only builds have the counter too, and it stays 0 there.
#pragma once
#include <cstdint>

namespace fg::cuda {

void count_host_sync();
int64_t host_sync_count();  // this thread's host waits since it started

}  // namespace fg::cuda
