#include "flowgrad/core/env.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "flowgrad/base/errors.h"

namespace fg::env {
namespace {

int64_t read_int(const char* name, int64_t fallback, int64_t lo) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long parsed = std::strtoll(v, &end, 10);
  FG_CHECK(end && *end == '\0' && parsed >= lo, Value, "environment variable ", name, "='", v,
           "' is not an integer >= ", lo);
  return parsed;
}

std::string read_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The first of the names that is set, as an integer (fallback when none is).
int read_first(std::initializer_list<const char*> names, int fallback, int lo) {
  for (const char* name : names)
    if (!read_text(name).empty()) return static_cast<int>(read_int(name, fallback, lo));
  return fallback;
}

}  // namespace

int num_threads() {
  static const int n = static_cast<int>(
      read_int("FLOWGRAD_NUM_THREADS", std::max(1u, std::thread::hardware_concurrency()), 1));
  return n;
}

bool blas_on_pool() {
  const std::string v = read_text("FLOWGRAD_BLAS_THREADS");
  FG_CHECK(v.empty() || v == "pool" || v == "openblas", Value, "environment variable FLOWGRAD_BLAS_THREADS='", v,
           "' is not 'pool' or 'openblas'");
  return v != "openblas";
}

std::string cpu_isa() { return read_text("FLOWGRAD_ISA"); }

bool sgemm_avx512() {
  const std::string v = read_text("FLOWGRAD_SGEMM");
  FG_CHECK(v.empty() || v == "avx512" || v == "blas", Value, "environment variable FLOWGRAD_SGEMM='", v,
           "' is not 'avx512' or 'blas'");
  return v != "blas";
}

std::string conv_kernel() {
  const std::string v = read_text("FLOWGRAD_CONV");
  FG_CHECK(v.empty() || v == "auto" || v == "own" || v == "onednn", Value, "environment variable FLOWGRAD_CONV='", v,
           "' is not 'auto', 'own' or 'onednn'");
  return v.empty() ? "auto" : v;
}

int64_t cpu_cache_bytes() {
  static const int64_t bytes = read_int("FLOWGRAD_CPU_CACHE_MB", 1024, 0) << 20;
  return bytes;
}

int debug_level() {
  static const int level = static_cast<int>(read_int("FLOWGRAD_DEBUG", 0, 0));
  return level;
}

bool cuda_caching() {
  static const bool caching = read_int("FLOWGRAD_CUDA_NO_CACHING", 0, 0) == 0;
  return caching;
}

int64_t cublas_workspace_mb() { return read_text("FLOWGRAD_CUBLAS_WORKSPACE_MB").empty() ? -1 : read_int("FLOWGRAD_CUBLAS_WORKSPACE_MB", 0, 0); }

bool plan_planner() { return read_int("FLOWGRAD_NO_PLANNER", 0, 0) == 0; }
bool plan_fusion() { return read_int("FLOWGRAD_NO_FUSION", 0, 0) == 0; }
std::string plan_skip() { return read_text("FLOWGRAD_PLAN_SKIP"); }
bool plan_debug() { return read_int("FLOWGRAD_DEBUG_PLAN", 0, 0) != 0; }
bool cuda_graphs() { return read_int("FLOWGRAD_NO_CUDA_GRAPH", 0, 0) == 0; }
bool capture_check() { return read_int("FLOWGRAD_CAPTURE_CHECK", 1, 0) != 0; }
std::string mpi_library() { return read_text("FLOWGRAD_MPI_LIBRARY"); }
std::string nccl_library() { return read_text("FLOWGRAD_NCCL_LIBRARY"); }

JobRank job_rank() {
  JobRank l;
  l.rank = read_first({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0, 0);
  l.world_size = read_first({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, 1);
  l.local_rank = read_first({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0, 0);
  l.master_addr = read_text("MASTER_ADDR");
  if (l.master_addr.empty()) l.master_addr = "127.0.0.1";
  l.master_port = read_first({"MASTER_PORT"}, 29500, 1);
  l.token = read_text("FLOWGRAD_RENDEZVOUS_TOKEN");
  return l;
}

}  // namespace fg::env
