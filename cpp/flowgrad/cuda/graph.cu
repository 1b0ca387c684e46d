// Stream capture into CUDA graphs (graph.h).
#include <cuda_runtime.h>

#include <map>

#include "flowgrad/core/errors.h"
#include "flowgrad/cuda/graph.h"

namespace fg::cuda {
namespace {

void check(cudaError_t err, const char* what) {
  FG_CHECK(err == cudaSuccess, Device, what, ": ", cudaGetErrorString(err));
}

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (device != previous_) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// One capture stream per (thread, device); a capture never runs work, so it needs no ordering
// with other streams (the replay is launched on the caller's stream).
cudaStream_t capture_stream(int device) {
  thread_local std::map<int, cudaStream_t> streams;
  cudaStream_t& s = streams[device];
  if (!s) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "CUDA graph capture (cudaStreamCreate)");
  return s;
}

bool invalidated(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusActive;
}

struct Broken {};  // thrown by progress() when the previous step invalidated the capture

}  // namespace

CapturedGraph::~CapturedGraph() {
  DeviceScope scope(device_);
  cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(exec_));
  cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph_));
}

void CapturedGraph::launch(StreamHandle stream) const {
  DeviceScope scope(device_);
  check(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec_), reinterpret_cast<cudaStream_t>(stream)),
        "replaying a captured step (cudaGraphLaunch)");
}

CaptureResult capture(int device, const std::function<void(const std::function<void(int)>&)>& body) {
  CaptureResult r;
  DeviceScope scope(device);
  cudaStream_t s = capture_stream(device);
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "CUDA graph capture (cudaStreamBeginCapture)");
  int step = -1;
  try {
    StreamGuard on_capture(device, reinterpret_cast<StreamHandle>(s));
    body([&](int i) {
      if (invalidated(s)) throw Broken{};
      step = i;
    });
    if (invalidated(s)) throw Broken{};
  } catch (const Broken&) {
    r.why = "a CUDA call that cannot be captured (a synchronising copy, an allocation or a legacy-stream launch) "
            "invalidated the capture";
  } catch (const std::exception& e) {
    r.why = e.what();
  }
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (r.why.empty() && ended != cudaSuccess) r.why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
  if (!r.why.empty()) {
    r.step = step;
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; clear them for the plain run that follows
    return r;
  }
  size_t nodes = 0;
  check(cudaGraphGetNodes(graph, nullptr, &nodes), "CUDA graph capture (cudaGraphGetNodes)");
  if (nodes == 0) {
    cudaGraphDestroy(graph);
    r.why = "the capture recorded no work";
    return r;
  }
  cudaGraphExec_t exec = nullptr;
  cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  if (made != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    r.why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
    return r;
  }
  r.graph = std::make_unique<CapturedGraph>(device, reinterpret_cast<uintptr_t>(graph), reinterpret_cast<uintptr_t>(exec),
                                            nodes);
  return r;
}

}  // namespace fg::cuda
