// Row-major GEMM on CUDA through cuBLAS. cuBLAS is opened with dlopen on first use, not
// linked: `import flowgrad` must work on machines that have no CUDA libraries on the loader
// path, and only a CUDA matmul needs them. The toolkit's library directory found at build time
// is tried after the loader's own search.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/captured_graph.h"
#include "flowgrad/cuda/runtime.h"
#include "kernels/common/launch.cuh"
#include "kernels/linalg/gemm.h"

namespace fg {
namespace {

#ifndef FLOWGRAD_CUDA_LIBRARY_DIR
#define FLOWGRAD_CUDA_LIBRARY_DIR ""
#endif

using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
using SgemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*,
                                   const float*, int, const float*, int, const float*, float*, int);
using DgemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const double*,
                                   const double*, int, const double*, int, const double*, double*, int);
using MathModeFn = cublasStatus_t (*)(cublasHandle_t, cublasMath_t);
using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using SetWorkspaceFn = cublasStatus_t (*)(cublasHandle_t, void*, size_t);
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType_t, int, const void*, cudaDataType_t, int, const void*,
                                    void*, cudaDataType_t, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const void*, const void*, cudaDataType_t, int, long long, const void*,
                                           cudaDataType_t, int, long long, const void*, void*, cudaDataType_t, int,
                                           long long, int, cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  CreateFn create = nullptr;
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  MathModeFn set_math_mode = nullptr;
  SetStreamFn set_stream = nullptr;
  SetWorkspaceFn set_workspace = nullptr;  // optional (cuBLAS 11.4+)
  GemmExFn gemm_ex = nullptr;
  GemmBatchedExFn gemm_batched_ex = nullptr;
  std::string error;
};

const Cublas& cublas() {
  static Cublas lib = [] {
    Cublas c;
    const std::string dir = FLOWGRAD_CUDA_LIBRARY_DIR;
    void* handle = nullptr;
    for (std::string name : {"libcublas.so", "libcublas.so.13", "libcublas.so.12"}) {
      handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle && !dir.empty()) handle = dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
    }
    if (!handle) {
      c.error = "cuBLAS (libcublas.so) was not found by the dynamic loader; add its directory to LD_LIBRARY_PATH";
      return c;
    }
    c.create = reinterpret_cast<CreateFn>(dlsym(handle, "cublasCreate_v2"));
    c.sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "cublasSgemm_v2"));
    c.dgemm = reinterpret_cast<DgemmFn>(dlsym(handle, "cublasDgemm_v2"));
    c.set_math_mode = reinterpret_cast<MathModeFn>(dlsym(handle, "cublasSetMathMode"));
    c.set_stream = reinterpret_cast<SetStreamFn>(dlsym(handle, "cublasSetStream_v2"));
    c.set_workspace = reinterpret_cast<SetWorkspaceFn>(dlsym(handle, "cublasSetWorkspace_v2"));
    c.gemm_ex = reinterpret_cast<GemmExFn>(dlsym(handle, "cublasGemmEx"));
    c.gemm_batched_ex = reinterpret_cast<GemmBatchedExFn>(dlsym(handle, "cublasGemmStridedBatchedEx"));
    if (!c.create || !c.sgemm || !c.dgemm || !c.set_math_mode || !c.set_stream || !c.gemm_ex || !c.gemm_batched_ex)
      c.error = "libcublas.so lacks the expected symbols";
    return c;
  }();
  return lib;
}

// One handle per (thread, device): a cuBLAS handle must not be used by two threads at once
// (level-parallel FlowBuilder branches call gemm from pool threads). The handle follows the
// thread's current stream, with the stream's workspace (cuda::stream_workspace: one per stream,
// counted by the allocator, made the first time the stream is seen, before capture:
// gemm_cuda_prepare_stream), so a gemm inside CUDA graph capture never asks cuBLAS to allocate.
// cublasSetStream resets the workspace to cuBLAS's default pool, so it is set again after every
// stream change, and after a destroyed stream released its workspace (the epoch moved).
struct ThreadHandle {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  bool bound = false;  // bound to `stream` at least once
  uint64_t epoch = 0;  // cuda::workspace_epoch() when bound
};

cublasHandle_t handle_for_current_device(const KernelEnv& env) {
  thread_local ThreadHandle handles[64];
  int device = 0;
  cudaGetDevice(&device);
  FG_CHECK(device >= 0 && device < 64, Device, "matmul on cuda: device index ", device, " out of range");
  ThreadHandle& h = handles[device];
  if (!h.handle) {
    cublasStatus_t st = cublas().create(&h.handle);
    FG_CHECK(st == CUBLAS_STATUS_SUCCESS, Device, "matmul on cuda: cublasCreate failed with status ", static_cast<int>(st));
  }
  cublas().set_math_mode(h.handle, env.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  cudaStream_t stream = library_stream(env);
  const uint64_t epoch = cuda::workspace_epoch();
  if (!h.bound || stream != h.stream || epoch != h.epoch) {
    cublasStatus_t st = cublas().set_stream(h.handle, stream);
    FG_CHECK(st == CUBLAS_STATUS_SUCCESS, Device, "matmul on cuda: cublasSetStream failed with status ", static_cast<int>(st));
    if (cublas().set_workspace) {
      cuda::Workspace ws = cuda::stream_workspace(device, reinterpret_cast<uintptr_t>(stream));
      if (ws.ptr) cublas().set_workspace(h.handle, ws.ptr, ws.bytes);
    }
    h.stream = stream;
    h.bound = true;
    h.epoch = epoch;
  }
  return h.handle;
}

}  // namespace

void gemm_cuda_prepare_stream() {
  if (cublas().error.empty()) handle_for_current_device(KernelEnv{cuda::launch_stream()});
}

namespace {
[[maybe_unused]] const bool g_prepares_capture_streams = (cuda::on_new_capture_stream(gemm_cuda_prepare_stream), true);
}  // namespace

namespace {

int as_int(int64_t v, const char* what) {
  FG_CHECK(v <= INT32_MAX, Value, "matmul on cuda: ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// cuBLAS's element and compute types for a dtype: halves and float32 accumulate in float32
// (TF32 tensor cores for float32 when enabled), float64 in float64.
struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};

GemmTypes gemm_types(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::Float32: return {CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    default:
      fail(ErrorKind::DType, "matmul on cuda: ", dtype_name(dtype),
           " is not supported (cuBLAS multiplies float16, bfloat16, float32 and float64)");
  }
}

void check_status(cublasStatus_t st, int64_t M, int64_t N, int64_t K) {
  FG_CHECK(st == CUBLAS_STATUS_SUCCESS, Device, "matmul on cuda: cuBLAS gemm failed with status ", static_cast<int>(st),
           " (M=", M, ", N=", N, ", K=", K, ")");
}

// C = A B + beta C, beta 0 (overwrite) or 1 (accumulate).
void gemm_scaled(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                 int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
  GemmTypes types = gemm_types(dtype, env.tf32);
  FG_CHECK(cublas().error.empty(), Device, "matmul on cuda: ", cublas().error);
  if (M == 0 || N == 0) return;
  cublasHandle_t h = handle_for_current_device(env);
  cuda::LibraryKernels library(env.stream);  // the kernels cuBLAS queues, for the capture self-check
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = as_int(N, "N"), n = as_int(M, "M"), k = as_int(K, "K");
  int la = as_int(lda, "lda"), lb = as_int(ldb, "ldb"), lc = as_int(ldc, "ldc");
  cublasStatus_t st;
  if (dtype == DType::Float32) {
    const float one = 1.0f, b = static_cast<float>(beta);
    st = cublas().sgemm(h, op_b, op_a, m, n, k, &one, static_cast<const float*>(B), lb, static_cast<const float*>(A), la,
                        &b, static_cast<float*>(C), lc);
  } else if (dtype == DType::Float64) {
    const double one = 1.0;
    st = cublas().dgemm(h, op_b, op_a, m, n, k, &one, static_cast<const double*>(B), lb, static_cast<const double*>(A),
                        la, &beta, static_cast<double*>(C), lc);
  } else {  // half inputs and output, float32 accumulation (alpha and beta are float32)
    const float one = 1.0f, b = static_cast<float>(beta);
    st = cublas().gemm_ex(h, op_b, op_a, m, n, k, &one, B, types.data, lb, A, types.data, la, &b, C, types.data, lc,
                          types.compute, CUBLAS_GEMM_DEFAULT);
  }
  check_status(st, M, N, K);
}

}  // namespace

void gemm_cuda(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               const void* A, int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc) {
  gemm_scaled(env, dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, 0.0, C, ldc);
}

void gemm_accumulate_cuda(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                          int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc) {
  gemm_scaled(env, dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, 1.0, C, ldc);
}

void gemm_batched_cuda(const KernelEnv& env, DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                       int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, void* C,
                       int64_t ldc, int64_t stride_c, int64_t batches) {
  GemmTypes types = gemm_types(dtype, env.tf32);
  FG_CHECK(cublas().error.empty(), Device, "matmul on cuda: ", cublas().error);
  if (M == 0 || N == 0 || batches == 0) return;
  cublasHandle_t h = handle_for_current_device(env);
  cuda::LibraryKernels library(env.stream);  // the kernels cuBLAS queues, for the capture self-check
  cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = as_int(N, "N"), n = as_int(M, "M"), k = as_int(K, "K");
  int la = as_int(lda, "lda"), lb = as_int(ldb, "ldb"), lc = as_int(ldc, "ldc"), count = as_int(batches, "batch");
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  bool f64 = dtype == DType::Float64;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  check_status(cublas().gemm_batched_ex(h, op_b, op_a, m, n, k, one, B, types.data, lb, stride_b, A, types.data, la,
                                        stride_a, zero, C, types.data, lc, stride_c, count, types.compute,
                                        CUBLAS_GEMM_DEFAULT),
               M, N, K);
}

}  // namespace fg
