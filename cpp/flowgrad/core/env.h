// The one place that reads environment variables. Every flag is listed in README's table.
#pragma once
#include <cstdint>

namespace fg::env {

int num_threads();           // FLOWGRAD_NUM_THREADS, default: the machine's cores
int64_t cpu_cache_bytes();   // FLOWGRAD_CPU_CACHE_MB, default 1024; 0 disables caching
int debug_level();           // FLOWGRAD_DEBUG, default 0
bool cuda_caching();         // FLOWGRAD_CUDA_NO_CACHING=1 turns the CUDA caching allocator off

}  // namespace fg::env
