#include "flowgrad/cuda/host_sync.h"

namespace fg::cuda {
namespace {
thread_local int64_t t_host_syncs = 0;
}

void count_host_sync() { ++t_host_syncs; }
int64_t host_sync_count() { return t_host_syncs; }

}  // namespace fg::cuda
