// The NCCL transport for CUDA tensors. libnccl is opened with dlopen on first use (the CUDA
// toolkit's directory, the system, the nvidia-nccl wheel), so no NCCL header or library is
// needed to build or import flowgrad. The declarations below are NCCL's stable C ABI (nccl.h).
#include <dlfcn.h>

#include <cstring>
#include <vector>

#include "flowgrad/core/env.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "flowgrad/distributed/process_group.h"
#include "flowgrad/distributed/rendezvous.h"
#include "flowgrad/ops/ops.h"

#ifdef FLOWGRAD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifndef FLOWGRAD_CUDA_LIBRARY_DIR
#define FLOWGRAD_CUDA_LIBRARY_DIR ""
#endif

namespace fg::dist {

std::vector<std::string> g_nccl_library_hints;  // set by the bindings: the wheel's lib dir

namespace {

struct NcclUniqueId { char internal[128]; };
using NcclComm = struct NcclCommOpaque*;
using Stream = void*;  // cudaStream_t: the calling thread's current stream (cuda/stream.h)
enum NcclResult : int { kNcclSuccess = 0 };
// Collectives queue on the calling thread's current stream (a captured step's stream included).
Stream stream() { return reinterpret_cast<Stream>(cuda::launch_stream()); }
enum NcclDataType : int { kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBFloat16 = 9 };
enum NcclRedOp : int { kSum = 0, kMax = 2, kMin = 3, kAvg = 4 };

const char* kInstallHint = "install NCCL with `pip install nvidia-nccl-cu12` (or the system package "
                           "libnccl2), or set FLOWGRAD_NCCL_LIBRARY to the libnccl.so.2 to use";
constexpr double kRendezvousTimeoutS = 300;

class NcclBackend final : public Backend {
 public:
  NcclBackend() {
    std::string why;
    FG_CHECK(cuda::built_with_cuda(), Device, "distributed.init(backend='nccl'): this flowgrad was "
             "built without CUDA; NCCL needs a CUDA build (nvcc at build time) and a GPU. Use "
             "backend='mpi' for CPU tensors");
    int devices = cuda::device_count(&why);
    FG_CHECK(devices > 0, Device, "distributed.init(backend='nccl'): no CUDA device (", why, ")");
    open_library();
    job_ = env::job_rank();
    device_ = job_.local_rank % devices;
#ifdef FLOWGRAD_HAVE_CUDA
    FG_CHECK(cudaSetDevice(device_) == cudaSuccess, Device, "distributed.init: cannot select cuda:", device_);
#endif
    NcclUniqueId id{};
    if (job_.rank == 0) check(GetUniqueId_(&id), "ncclGetUniqueId");
    std::string shared = rendezvous(job_, std::string(id.internal, sizeof id.internal), kRendezvousTimeoutS);
    std::memcpy(id.internal, shared.data(), sizeof id.internal);
    check(CommInitRank_(&comm_, job_.world_size, id, job_.rank), "ncclCommInitRank");
  }

  const char* name() const override { return "nccl"; }
  int rank() const override { return job_.rank; }
  int size() const override { return job_.world_size; }
  bool host_buffers() const override { return false; }
  bool blocking() const override { return false; }
  bool supports(ReduceOp) const override { return true; }  // ncclAvg since NCCL 2.10
  bool reduces(DType dtype) const override { return dtype != DType::Int16; }  // NCCL has no 16-bit integers

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    cuda::LibraryKernels library;  // NCCL's kernels, for the capture self-check
    check(AllReduce_(data, data, count, type(dtype), red_op(op), comm_, stream()), "ncclAllReduce");
  }
  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    cuda::LibraryKernels library;  // NCCL's kernels, for the capture self-check
    Moved m = moved(count, dtype);
    check(Broadcast_(data, data, m.count, m.type, root, comm_, stream()), "ncclBroadcast");
  }
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override {
    cuda::LibraryKernels library;  // NCCL's kernels, for the capture self-check
    Moved m = moved(count, dtype);
    check(AllGather_(in, out, m.count, m.type, comm_, stream()), "ncclAllGather");
  }
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override {
    cuda::LibraryKernels library;  // NCCL's kernels, for the capture self-check
    check(ReduceScatter_(in, out, count, type(dtype), red_op(op), comm_, stream()), "ncclReduceScatter");
  }
  void barrier() override {  // NCCL has none: a one-element all-reduce, then wait for the stream
    Tensor one = zeros({1}, DType::Float32, Device{DeviceType::CUDA, device_});
    all_reduce(one.data_ptr(), 1, DType::Float32, ReduceOp::Sum);
    cuda::synchronize();
  }
  void abort(int code) override {
    if (comm_) CommAbort_(comm_);
    std::_Exit(code);
  }
  void finalize() override {
    if (comm_) CommDestroy_(comm_);
    comm_ = nullptr;
  }

 private:
  void open_library() {
    std::vector<std::string> candidates{env::nccl_library()};  // the user's choice, else ours
    if (candidates[0].empty()) {
      candidates.clear();
      for (const std::string& dir : g_nccl_library_hints) candidates.push_back(dir + "/libnccl.so.2");
      if (*FLOWGRAD_CUDA_LIBRARY_DIR) candidates.push_back(std::string(FLOWGRAD_CUDA_LIBRARY_DIR) + "/libnccl.so.2");
      candidates.push_back("libnccl.so.2");
    }
    std::string errors;
    for (const std::string& path : candidates) {
      lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib_) break;
      errors += std::string("\n  ") + dlerror();
    }
    FG_CHECK(lib_, Device, "distributed.init(backend='nccl'): cannot load NCCL; ", kInstallHint,
             ". Tried:", errors);
    resolve(GetUniqueId_, "ncclGetUniqueId");
    resolve(CommInitRank_, "ncclCommInitRank");
    resolve(AllReduce_, "ncclAllReduce");
    resolve(Broadcast_, "ncclBroadcast");
    resolve(AllGather_, "ncclAllGather");
    resolve(ReduceScatter_, "ncclReduceScatter");
    resolve(CommDestroy_, "ncclCommDestroy");
    resolve(CommAbort_, "ncclCommAbort");
    resolve(GetErrorString_, "ncclGetErrorString");
  }

  template <class F>
  void resolve(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(lib_, name));
    FG_CHECK(fn, Device, "distributed.init(backend='nccl'): the NCCL library lacks '", name,
             "'; it is too old (flowgrad needs NCCL >= 2.10); ", kInstallHint);
  }

  void check(int result, const char* call) {
    FG_CHECK(result == kNcclSuccess, Runtime, "distributed (nccl): ", call, " failed on rank ",
             job_.rank, ": ", GetErrorString_(result));
  }

  // NCCL's type for a reduction; every dtype is listed (no default), so -Wswitch names a new one.
  static int type(DType dtype) {
    switch (dtype) {
      case DType::Float32: return kFloat32;
      case DType::Float64: return kFloat64;
      case DType::Float16: return kFloat16;
      case DType::BFloat16: return kBFloat16;
      case DType::Int64: return kInt64;
      case DType::Int32: return kInt32;
      case DType::Int8: return kInt8;
      case DType::UInt8: return kUint8;
      case DType::Bool: return kUint8;  // moved only: the group refuses to reduce bool
      case DType::Int16: break;         // moved as bytes; the group refuses to reduce it (reduces())
    }
    fail(ErrorKind::DType, "distributed (nccl): no NCCL type reduces ", dtype_name(dtype));
  }

  // A broadcast or gather only moves bytes: int16 (no NCCL type) goes as twice as many bytes.
  struct Moved {
    size_t count;
    int type;
  };
  static Moved moved(int64_t count, DType dtype) {
    if (dtype == DType::Int16) return {static_cast<size_t>(count) * 2, kUint8};
    return {static_cast<size_t>(count), type(dtype)};
  }

  static int red_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum: return kSum;
      case ReduceOp::Avg: return kAvg;
      case ReduceOp::Max: return kMax;
      case ReduceOp::Min: return kMin;
    }
    return kSum;
  }

  void* lib_ = nullptr;
  env::JobRank job_;
  int device_ = 0;
  NcclComm comm_ = nullptr;
  int (*GetUniqueId_)(NcclUniqueId*) = nullptr;
  int (*CommInitRank_)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  int (*AllReduce_)(const void*, void*, size_t, int, int, NcclComm, Stream) = nullptr;
  int (*Broadcast_)(const void*, void*, size_t, int, int, NcclComm, Stream) = nullptr;
  int (*AllGather_)(const void*, void*, size_t, int, NcclComm, Stream) = nullptr;
  int (*ReduceScatter_)(const void*, void*, size_t, int, int, NcclComm, Stream) = nullptr;
  int (*CommDestroy_)(NcclComm) = nullptr;
  int (*CommAbort_)(NcclComm) = nullptr;
  const char* (*GetErrorString_)(int) = nullptr;
};

}  // namespace

std::unique_ptr<Backend> open_nccl() { return std::make_unique<NcclBackend>(); }

}  // namespace fg::dist
