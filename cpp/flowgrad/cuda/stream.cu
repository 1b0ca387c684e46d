// Streams, events and the thread-local current stream (stream.h).
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/host_sync.h"
#include "flowgrad/cuda/scope.cuh"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"

namespace fg::cuda {
namespace {

constexpr int kMaxDevices = kMaxContextDevices;

void check_device(int device, const char* what) {
  std::string why;
  int count = device_count(&why);
  FG_CHECK(count > 0, Device, what, ": cuda:", device, " is not available: ", why);
  FG_CHECK(device >= 0 && device < count && device < kMaxDevices, Device, what, ": cuda:", device,
           " does not exist (", count, " device(s) visible)");
}

cudaStream_t as_stream(StreamHandle h) { return reinterpret_cast<cudaStream_t>(h); }
cudaEvent_t as_event(uintptr_t e) { return reinterpret_cast<cudaEvent_t>(e); }

// This thread's current streams (the context's) with `device`'s replaced.
std::array<StreamHandle, kMaxDevices> with_stream(int device, StreamHandle handle) {
  std::array<StreamHandle, kMaxDevices> streams = context().streams;
  streams.at(device) = handle;
  return streams;
}

}  // namespace

Stream::~Stream() {
  if (!owned || !handle) return;
  never_throwing("destroying an fg.cuda.Stream", [this] {
    retire_stream(device, handle);  // G2: nothing recorded on it outlives it; F9: its workspace goes too
    DeviceScope scope(device);
    cudaStreamDestroy(as_stream(handle));
  });
}

void Stream::synchronize() const {
  DeviceScope scope(device);
  host_wait(cudaStreamSynchronize(as_stream(handle)), "Stream.synchronize (cudaStreamSynchronize)");
}

bool Stream::query() const {
  DeviceScope scope(device);
  cudaError_t err = cudaStreamQuery(as_stream(handle));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error the next launch check may report
    return false;
  }
  check(err, "Stream.query (cudaStreamQuery)");
  return true;
}

std::shared_ptr<Stream> create_stream(int device, int priority) {
  check_device(device, "fg.cuda.Stream");
  DeviceScope scope(device);
  cudaStream_t s = nullptr;
  // Blocking streams (not cudaStreamNonBlocking): work on the legacy default stream, which code
  // outside flowgrad may still use, stays ordered with them.
  check(cudaStreamCreateWithPriority(&s, cudaStreamDefault, priority), "fg.cuda.Stream (cudaStreamCreate)");
  return std::make_shared<Stream>(device, reinterpret_cast<StreamHandle>(s), true);
}

std::shared_ptr<Stream> current_stream(int device) {
  check_device(device, "fg.cuda.current_stream");
  return std::make_shared<Stream>(device, context().streams[device], false);
}

std::shared_ptr<Stream> default_stream(int device) {
  check_device(device, "fg.cuda.default_stream");
  return std::make_shared<Stream>(device, 0, false);
}

void set_current_stream(int device, StreamHandle handle) {
  FG_CHECK(device >= 0 && device < kMaxDevices, Device, "fg.cuda.set_stream: cuda:", device, " is out of range");
  context().streams[device] = handle;
}

StreamHandle current_stream_handle(int device) {
  return device >= 0 && device < kMaxDevices ? context().streams[device] : 0;
}

StreamHandle launch_stream() {
  int device = 0;
  cudaGetDevice(&device);
  return current_stream_handle(device);
}

bool capturing(StreamHandle stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(as_stream(stream), &status) != cudaSuccess) {
    cudaGetLastError();  // the legacy stream cannot be asked while another stream captures
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

DeviceGuard::DeviceGuard(int device) {
  int current = 0;
  cudaGetDevice(&current);
  if (current == device) return;
  check(cudaSetDevice(device), "cudaSetDevice");
  previous_ = current;
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

namespace {
thread_local LaunchCount t_launches;
}  // namespace

void count_launch() { ++t_launches.ours; }
LaunchCount launch_count() { return t_launches; }

namespace {
// The kernel nodes of a graph, typing only the nodes not seen by the previous count of the same
// graph: a capture counts once per library call, so walking and typing every node each time
// made capture O(nodes x library calls) (review G12). Per thread, like the capture itself.
struct KernelNodeMemo {
  unsigned long long capture = 0;  // the capture's id: unique in the process, unlike a graph's address
  std::unordered_set<cudaGraphNode_t> typed;
  size_t kernels = 0;
};
thread_local KernelNodeMemo t_memo;

size_t count_kernel_nodes(cudaGraph_t g, unsigned long long capture, KernelNodeMemo& memo) {
  size_t count = 0;
  check(cudaGraphGetNodes(g, nullptr, &count), "cudaGraphGetNodes");
  if (memo.capture != capture || capture == 0 || count < memo.typed.size()) memo = KernelNodeMemo{capture, {}, 0};
  if (count == memo.typed.size()) return memo.kernels;
  std::vector<cudaGraphNode_t> nodes(count);
  check(cudaGraphGetNodes(g, nodes.data(), &count), "cudaGraphGetNodes");
  for (size_t k = 0; k < count; ++k) {
    if (!memo.typed.insert(nodes[k]).second) continue;
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    check(cudaGraphNodeGetType(nodes[k], &type), "cudaGraphNodeGetType");
    memo.kernels += type == cudaGraphNodeTypeKernel;
  }
  return memo.kernels;
}
}  // namespace

size_t kernel_nodes(uintptr_t graph) {
  KernelNodeMemo once;  // a finished graph is counted once: no memo to keep
  return count_kernel_nodes(reinterpret_cast<cudaGraph_t>(graph), 0, once);
}

size_t captured_kernel_nodes(StreamHandle stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  cudaGraph_t graph = nullptr;
  check(cudaStreamGetCaptureInfo(as_stream(stream), &status, &capture, &graph), "cudaStreamGetCaptureInfo");
  return status == cudaStreamCaptureStatusActive && graph ? count_kernel_nodes(graph, capture, t_memo) : 0;
}

LibraryKernels::LibraryKernels(StreamHandle stream) : stream_(stream), capturing_(capturing(stream_)) {
  if (capturing_) before_ = captured_kernel_nodes(stream_);
}
LibraryKernels::~LibraryKernels() {
  if (!capturing_) return;
  try {
    size_t after = captured_kernel_nodes(stream_);  // 0 when the call broke the capture
    if (after > before_) t_launches.library += after - before_;
  } catch (const Error&) {  // the capture broke in the call; it is reported when it ends
    cudaGetLastError();
  }
}

Event::Event(int device, bool timing) : device_(device), timing_(timing) {
  check_device(device, "fg.cuda.Event");
  DeviceScope scope(device);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "fg.cuda.Event (cudaEventCreate)");
  event_ = reinterpret_cast<uintptr_t>(e);
}

Event::~Event() {
  never_throwing("destroying an fg.cuda.Event", [this] {
    DeviceScope scope(device_);
    cudaEventDestroy(as_event(event_));
  });
}

void Event::record(StreamHandle stream) {
  DeviceScope scope(device_);
  check(cudaEventRecord(as_event(event_), as_stream(stream)), "Event.record (cudaEventRecord)");
  recorded_ = true;
}

void Event::wait(StreamHandle stream) const {
  DeviceScope scope(device_);
  check(cudaStreamWaitEvent(as_stream(stream), as_event(event_), 0), "Event.wait (cudaStreamWaitEvent)");
}

void Event::synchronize() const {
  host_wait(cudaEventSynchronize(as_event(event_)), "Event.synchronize (cudaEventSynchronize)");
}

bool Event::query() const {
  DeviceScope scope(device_);
  cudaError_t err = cudaEventQuery(as_event(event_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // as in Stream::query
    return false;
  }
  check(err, "Event.query (cudaEventQuery)");
  return true;
}

double Event::elapsed_ms(const Event& end) const {
  FG_CHECK(timing_ && end.timing_, Value, "Event.elapsed_time: both events need enable_timing=True");
  FG_CHECK(recorded_ && end.recorded_, Value, "Event.elapsed_time: both events must be recorded first");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, as_event(event_), as_event(end.event_)), "Event.elapsed_time (cudaEventElapsedTime)");
  return ms;
}

StreamGuard::StreamGuard(int device, StreamHandle handle) : Scoped(with_stream(device, handle)) {}

namespace {

// Branch streams per (device, origin stream, index), created on first use and kept.
StreamHandle branch_stream(int device, StreamHandle origin, int index) {
  static std::mutex mutex;
  static std::map<std::tuple<int, StreamHandle, int>, StreamHandle> pool;
  std::lock_guard<std::mutex> lock(mutex);
  StreamHandle& s = pool[{device, origin, index}];
  if (!s) {
    DeviceScope scope(device);
    cudaStream_t created = nullptr;
    check(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "branch stream (cudaStreamCreate)");
    s = reinterpret_cast<StreamHandle>(created);
  }
  return s;
}

// A disable-timing event recorded on `from` and waited on by `to`.
void order(StreamHandle from, StreamHandle to) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "stream fork/join (cudaEventCreate)");
  check(cudaEventRecord(e, as_stream(from)), "stream fork/join (cudaEventRecord)");
  check(cudaStreamWaitEvent(as_stream(to), e, 0), "stream fork/join (cudaStreamWaitEvent)");
  cudaEventDestroy(e);  // released once the wait is satisfied
}

}  // namespace

Fork::Fork(int device, int count) : device_(device), origin_(context().streams.at(device)) {
  DeviceScope scope(device);
  for (int i = 0; i < count; ++i) {
    branches_.push_back(branch_stream(device, origin_, i));
    order(origin_, branches_.back());
  }
}

void Fork::join() {
  if (joined_) return;
  joined_ = true;
  DeviceScope scope(device_);
  for (StreamHandle b : branches_) order(b, origin_);
}

Fork::~Fork() {
  try {
    join();
  } catch (...) {  // already unwinding from a branch's error; the sticky CUDA error reports later
  }
}

}  // namespace fg::cuda
