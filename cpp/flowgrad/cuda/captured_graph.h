// CUDA graphs by stream capture: the work a body queues on a capture stream becomes one graph,
// replayed with a single cudaGraphLaunch. Plans use this (plan/capture.cpp). Builds without
// CUDA raise DeviceError from capture; nothing else is reachable there.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flowgrad/cuda/stream.h"

namespace fg::cuda {

class CapturedGraph {
 public:
  // `stream`: the capture stream, kept with the graph because its cuBLAS workspace (F13: one per
  // captured graph, so graphs replayed at once on two streams never share one) is baked in.
  CapturedGraph(int device, uintptr_t graph, uintptr_t exec, size_t nodes, std::shared_ptr<Stream> stream = nullptr)
      : device_(device), graph_(graph), exec_(exec), nodes_(nodes), stream_(std::move(stream)) {}
  ~CapturedGraph();  // waits for the device first: a replay may still use the workspace
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void launch(StreamHandle stream) const;  // queues one replay on `stream`
  size_t nodes() const { return nodes_; }

 private:
  int device_;
  uintptr_t graph_, exec_;
  size_t nodes_;
  std::shared_ptr<Stream> stream_;
};

// What a capture attempt produced: a graph, or why not (`step` says which step of the body
// broke it: the body reports its progress through the callback it is given, -1 = none).
struct CaptureResult {
  std::unique_ptr<CapturedGraph> graph;
  std::string why;
  int step = -1;
};

// Captures `body` on a dedicated capture stream of `device` (a capture executes nothing, so it
// waits for no other stream); while the body runs, that capture stream is the current stream. The body calls `progress(i)` before step i, and capture stops at the first
// step that throws or invalidates the capture. Mode cudaStreamCaptureModeThreadLocal: unsafe
// calls (cudaMalloc, synchronous copies) from this thread fail the capture, while other host
// threads (data loading, other models) may keep using CUDA freely, which Global would forbid.
// Self-check: the graph must hold one kernel node per kernel flowgrad launched during the body,
// plus those library calls added (stream.h, LaunchCount); a launch that went to another stream
// ran once at capture time and would be missing from every replay, so a mismatch refuses the
// graph and `why` gives both counts.
CaptureResult capture(int device, const std::function<void(const std::function<void(int)>& progress)>& body);

// Work a library needs done on a new capture stream before capture begins, since it cannot
// allocate during capture (cuBLAS's handle and workspace per stream). The kernels register
// theirs at load time (kernels/linalg/gemm_cuda.cu): the device runtime stands below the kernels.
void on_new_capture_stream(void (*prepare)());

// Profiling: captures `body` as capture() does, with a timing event recorded inside the graph
// before each step and after the last (event record nodes), replays that graph once on this
// thread's current stream, waits, and returns each step's GPU milliseconds. An empty result
// with *why set when the capture failed (`*step` = the step that broke it, or -1).
std::vector<double> time_steps(int device, int steps,
                               const std::function<void(const std::function<void(int)>& progress)>& body,
                               std::string* why, int* step);

// Profiling a plain run (a plan not captured yet, or never): runs `body` on this thread's current
// stream with a timing event recorded before each step and after the last, waits, and returns each
// step's GPU milliseconds.
std::vector<double> time_plain(int device, int steps,
                               const std::function<void(const std::function<void(int)>& progress)>& body);

}  // namespace fg::cuda
