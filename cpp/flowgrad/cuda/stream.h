// CUDA streams and events, PyTorch's model: every thread has a current stream per device (the
// legacy default stream until set), every kernel launch, cuBLAS call and copy goes to the
// current stream, and events order work between streams. Handles are opaque integers so that
// code without CUDA headers (bindings, graph executor) can hold them. Builds without CUDA raise
// DeviceError from everything here except current_stream_or_default (0).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "flowgrad/base/stream.h"
#include "flowgrad/core/context.h"

namespace fg::cuda {

// A stream on one device. Owning streams are destroyed with the object (queued work still
// finishes); the default stream and pool streams are not owned.
struct Stream {
  int device = 0;
  StreamHandle handle = 0;
  bool owned = false;
  Stream() = default;
  Stream(int device, StreamHandle handle, bool owned) : device(device), handle(handle), owned(owned) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  void synchronize() const;
  bool query() const;  // true when all queued work has finished
};

std::shared_ptr<Stream> create_stream(int device, int priority);
std::shared_ptr<Stream> current_stream(int device);  // this thread's current stream
std::shared_ptr<Stream> default_stream(int device);
void set_current_stream(int device, StreamHandle handle);
// The current stream of the current device, for launches (0 in builds without CUDA).
StreamHandle launch_stream();
// This thread's current stream of `device` (0 for an index out of range or without CUDA).
StreamHandle current_stream_handle(int device);
// Whether work queued on `stream` is being captured into a CUDA graph.
bool capturing(StreamHandle stream);

// Makes `device` current for the scope (kernels launch on the current device's current stream),
// then restores the previous one. Ops, branch tasks and plans take one for their tensors' device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// The capture self-check's bookkeeping (captured_graph.cu), per thread. kernel_stream() counts every
// kernel flowgrad launches (kernels/common/launch.cuh; the NVRTC fused launch counts too); a
// LibraryKernels scope around a library call (cuBLAS, CUB, NCCL) adds the kernel nodes that the
// call put into the graph being captured, measured from that graph, since a library decides
// how many kernels it queues. Outside capture the scope costs one cudaStreamIsCapturing.
struct LaunchCount {
  uint64_t ours = 0;     // kernels flowgrad launched
  uint64_t library = 0;  // kernel nodes library calls added while capturing
};
LaunchCount launch_count();  // count_launch() is in base/stream.h
class LibraryKernels {
 public:
  explicit LibraryKernels(StreamHandle stream);  // the stream the library call queues on
  LibraryKernels() : LibraryKernels(launch_stream()) {}
  ~LibraryKernels();
  LibraryKernels(const LibraryKernels&) = delete;
  LibraryKernels& operator=(const LibraryKernels&) = delete;

 private:
  StreamHandle stream_ = 0;
  size_t before_ = 0;
  bool capturing_ = false;
};
// The kernel nodes of the graph `stream` is capturing into (0 when it is not capturing), and of
// a graph (a cudaGraph_t).
size_t captured_kernel_nodes(StreamHandle stream);
size_t kernel_nodes(uintptr_t graph);

// A CUDA event (optionally timing) on one device.
class Event {
 public:
  Event(int device, bool timing);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamHandle stream);
  void wait(StreamHandle stream) const;  // the stream waits for the recorded work
  void synchronize() const;
  bool query() const;
  double elapsed_ms(const Event& end) const;
  bool recorded() const { return recorded_; }
  int device() const { return device_; }

 private:
  int device_;
  bool timing_;
  bool recorded_ = false;
  uintptr_t event_ = 0;
};

// Makes `handle` the current stream of `device` for the scope (a Scoped over the context's
// streams, so every device's current stream is restored on exit).
class StreamGuard : public Scoped<&ExecContext::streams> {
 public:
  StreamGuard(int device, StreamHandle handle);
};

// Fork/join of level-parallel branches: `count` branch streams wait for the work queued on the
// origin (this thread's current stream) before the fork, and join() makes the origin wait for
// every branch. Branch streams are pooled per (device, origin stream), so blocks the caching
// allocator hands out on a branch stream are only reused by later forks from the same origin,
// which are ordered after every use of those blocks on the origin (no record_stream needed).
class Fork {
 public:
  Fork(int device, int count);
  ~Fork();  // joins if join() was not called (an exception in a branch)
  Fork(const Fork&) = delete;
  Fork& operator=(const Fork&) = delete;
  StreamHandle branch(int i) const { return branches_[i]; }
  int device() const { return device_; }
  void join();

 private:
  int device_;
  StreamHandle origin_;
  std::vector<StreamHandle> branches_;
  bool joined_ = false;
};

}  // namespace fg::cuda
