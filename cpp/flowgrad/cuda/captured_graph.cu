// Stream capture into CUDA graphs (graph.h).
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "flowgrad/base/device_error.h"
#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/captured_graph.h"
#include "flowgrad/cuda/host_sync.h"
#include "flowgrad/cuda/scope.cuh"

namespace fg::cuda {
namespace {

std::mutex g_prepare_mutex;
std::vector<void (*)()>& capture_preparations() {  // a function static: kernels register at load time
  static std::vector<void (*)()> prepare;
  return prepare;
}

// A capture stream per capture (F13): its cuBLAS workspace (cuda::stream_workspace) is baked into
// the graph's gemm nodes, so each graph keeps a stream, and a workspace, of its own. A capture
// never runs work, so the stream needs no ordering with others (replays run on the caller's).
std::shared_ptr<Stream> new_capture_stream(int device) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "CUDA graph capture (cudaStreamCreate)");
  return std::make_shared<Stream>(device, reinterpret_cast<StreamHandle>(s), true);
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

// "" when the graph holds exactly the kernels launched between `before` and `after`.
std::string launch_mismatch(cudaGraph_t graph, LaunchCount before, LaunchCount after) {
  const uint64_t ours = after.ours - before.ours, library = after.library - before.library;
  const size_t captured = kernel_nodes(reinterpret_cast<uintptr_t>(graph));
  if (captured == ours + library) return "";
  return "launch count mismatch: flowgrad launched " + std::to_string(ours) + " kernel(s) and library calls added " +
         std::to_string(library) + " while capturing, but the graph holds " + std::to_string(captured) +
         " kernel node(s); a launch on a stream outside the capture would run once now and never in a replay";
}

}  // namespace

CapturedGraph::~CapturedGraph() {
  never_throwing("destroying a captured CUDA graph", [this] {
    DeviceScope scope(device_);
    count_host_sync();
    cudaDeviceSynchronize();  // no replay still uses the workspace released with stream_
    cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(exec_));
    cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph_));
  });
}

void CapturedGraph::launch(StreamHandle stream) const {
  DeviceScope scope(device_);
  check(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec_), reinterpret_cast<cudaStream_t>(stream)),
        "replaying a captured step (cudaGraphLaunch)");
}

namespace {

using Body = std::function<void(const std::function<void(int)>&)>;

// capture() with `on_step(i, stream)` called inside the capture before step i (and with i = -1
// after the body).
CaptureResult capture_with(int device, const Body& body, const std::function<void(int, cudaStream_t)>& on_step);

}  // namespace

void on_new_capture_stream(void (*prepare)()) {
  std::lock_guard<std::mutex> lock(g_prepare_mutex);
  capture_preparations().push_back(prepare);
}

CaptureResult capture(int device, const Body& body) { return capture_with(device, body, nullptr); }

std::vector<double> time_steps(int device, int steps, const Body& body, std::string* why, int* step) {
  DeviceScope scope(device);  // its events and the wait belong to the plan's device (review G3)
  std::vector<cudaEvent_t> events(static_cast<size_t>(steps) + 1, nullptr);
  for (cudaEvent_t& e : events) check(cudaEventCreate(&e), "profiling a captured step (cudaEventCreate)");
  auto record = [&](int i, cudaStream_t s) {
    cudaEvent_t e = events[i < 0 ? steps : i];
    check(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal), "profiling a captured step (cudaEventRecord)");
  };
  CaptureResult r = capture_with(device, body, record);
  std::vector<double> ms;
  if (r.graph) {
    StreamHandle stream = current_stream_handle(device);
    r.graph->launch(stream);
    host_wait(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)), "profiling a captured step (cudaStreamSynchronize)");
    for (int i = 0; i < steps; ++i) {
      float t = 0;
      check(cudaEventElapsedTime(&t, events[i], events[i + 1]), "profiling a captured step (cudaEventElapsedTime)");
      ms.push_back(t);
    }
  }
  r.graph.reset();
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  *why = r.why;
  *step = r.step;
  return ms;
}

std::vector<double> time_plain(int device, int steps, const Body& body) {
  DeviceScope scope(device);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(current_stream_handle(device));
  std::vector<cudaEvent_t> events(static_cast<size_t>(steps) + 1, nullptr);
  std::vector<double> ms;
  try {
    for (cudaEvent_t& e : events) check(cudaEventCreate(&e), "profiling a step (cudaEventCreate)");
    std::function<void(int)> mark = [&](int i) {
      check(cudaEventRecord(events[i], stream), "profiling a step (cudaEventRecord)");
    };
    body(mark);
    check(cudaEventRecord(events[steps], stream), "profiling a step (cudaEventRecord)");
    host_wait(cudaEventSynchronize(events[steps]), "profiling a step (cudaEventSynchronize)");
    for (int i = 0; i < steps; ++i) {
      float t = 0;
      check(cudaEventElapsedTime(&t, events[i], events[i + 1]), "profiling a step (cudaEventElapsedTime)");
      ms.push_back(t);
    }
  } catch (...) {
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
    throw;
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return ms;
}

namespace {

CaptureResult capture_with(int device, const Body& body, const std::function<void(int, cudaStream_t)>& on_step) {
  CaptureResult r;
  DeviceScope scope(device);
  std::shared_ptr<Stream> stream = new_capture_stream(device);
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream->handle);
  {
    StreamGuard on_capture(device, reinterpret_cast<StreamHandle>(s));
    std::vector<void (*)()> prepare;
    {
      std::lock_guard<std::mutex> lock(g_prepare_mutex);
      prepare = capture_preparations();
    }
    for (auto* run : prepare) run();  // e.g. cuBLAS's handle and workspace for this stream
    index_error_sink();               // the device-error record, likewise
  }
  const LaunchCount before = launch_count();
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "CUDA graph capture (cudaStreamBeginCapture)");
  int step = -1;
  try {
    StreamGuard on_capture(device, reinterpret_cast<StreamHandle>(s));
    body([&](int i) {
      if (invalidated(s)) throw Broken{};
      step = i;
      if (on_step) on_step(i, s);
    });
    if (invalidated(s)) throw Broken{};
    if (on_step) on_step(-1, s);
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
  r.why = launch_mismatch(graph, before, launch_count());
  if (!r.why.empty()) {
    cudaGraphDestroy(graph);
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
                                            nodes, std::move(stream));
  return r;
}

}  // namespace

}  // namespace fg::cuda
