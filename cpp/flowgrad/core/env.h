// The one place that reads environment variables. Every flag is listed in README's table.
#pragma once
#include <cstdint>
#include <string>

namespace fg::env {

int num_threads();           // FLOWGRAD_NUM_THREADS, default: the machine's cores
bool blas_on_pool();         // FLOWGRAD_BLAS_THREADS: pool (default) or openblas (its own threads)
std::string cpu_isa();     // FLOWGRAD_ISA: generic, avx2 or avx512, at most the machine's (default: the machine's)
bool sgemm_avx512();         // FLOWGRAD_SGEMM: avx512 (default: flowgrad's float32 GEMM where the CPU has AVX-512) or blas
std::string conv_kernel();   // FLOWGRAD_CONV: auto (default: oneDNN where it wins, in builds with it), own or onednn
int64_t cpu_cache_bytes();   // FLOWGRAD_CPU_CACHE_MB, default 1024; 0 disables caching
int debug_level();           // FLOWGRAD_DEBUG, default 0
bool cuda_caching();         // FLOWGRAD_CUDA_NO_CACHING=1 turns the CUDA caching allocator off
int64_t cublas_workspace_mb();  // FLOWGRAD_CUBLAS_WORKSPACE_MB; -1 (unset): 32 MiB on sm_90+, PyTorch's 8 MiB + 128 KiB before
// Compiled plans read these when a plan is built (so tests can flip them between compiles).
bool plan_planner();         // FLOWGRAD_NO_PLANNER=1: every buffer gets its own bytes (no reuse)
bool plan_fusion();          // FLOWGRAD_NO_FUSION=1: no fused kernels
std::string plan_skip();     // FLOWGRAD_PLAN_SKIP: optional plan passes to skip, comma-separated (plan/passes/pipeline.cpp)
bool plan_debug();           // FLOWGRAD_DEBUG_PLAN=1: released arena ranges are filled with NaN
bool cuda_graphs();          // FLOWGRAD_NO_CUDA_GRAPH=1: plans on CUDA are never captured
bool capture_check();        // FLOWGRAD_CAPTURE_CHECK=0: a new capture is not checked against a plain step
std::string mpi_library();   // FLOWGRAD_MPI_LIBRARY: libmpi to dlopen instead of the default
std::string nccl_library();  // FLOWGRAD_NCCL_LIBRARY: libnccl to dlopen instead of the default

// Where this process sits in a launched job: RANK / WORLD_SIZE / LOCAL_RANK, else mpirun's
// OMPI_COMM_WORLD_*; the rendezvous at MASTER_ADDR (127.0.0.1) : MASTER_PORT (29500), where
// ranks prove they belong to the job with FLOWGRAD_RENDEZVOUS_TOKEN (the launcher sets it).
struct JobRank {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;
  int master_port = 29500;
  std::string token;
};
JobRank job_rank();

}  // namespace fg::env
