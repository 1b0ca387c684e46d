// Builds configured with FLOWGRAD_CUDA=OFF (or without nvcc) have no GPU runtime.
#include "flowgrad/base/errors.h"
#include "flowgrad/cuda/captured_graph.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"

#ifdef __clang__
// The stand-ins below never read the members the CUDA build's definitions use.
#pragma clang diagnostic ignored "-Wunused-private-field"
#endif

namespace fg::cuda {

#ifndef FLOWGRAD_CUDA_LEFT_OUT
#define FLOWGRAD_CUDA_LEFT_OUT ""
#endif

namespace {
// A build that found a driver or GPU but no compiler says so (CMakeLists.txt), with the fix.
const char* kWhy = FLOWGRAD_CUDA_LEFT_OUT[0]
                       ? "flowgrad was built without CUDA: " FLOWGRAD_CUDA_LEFT_OUT
                       : "flowgrad was built without CUDA (FLOWGRAD_CUDA=OFF, or no nvcc at build time: "
                         "FLOWGRAD_CUDA=pypi pip install '.[cuda]' builds it with PyPI's CUDA wheels)";
}  // namespace

bool built_with_cuda() { return false; }

int device_count(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}

void synchronize() {}
void install() {}
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}

Workspace stream_workspace(int, uintptr_t) { return {}; }
void retire_stream(int, uintptr_t) {}
uint64_t workspace_epoch() { return 0; }
void record_stream(void*, int, uintptr_t) { fail(ErrorKind::Device, "Tensor.record_stream: ", kWhy); }

void copy_bytes(void*, Device dst_device, const void*, Device src_device, size_t) {
  fail(ErrorKind::Device, "copy from ", src_device.str(), " to ", dst_device.str(), ": ", kWhy);
}

void copy_to_device_async(void*, Device device, const void*, size_t) {
  fail(ErrorKind::Device, "copy to ", device.str(), ": ", kWhy);
}

// Streams and events: the API exists and says why it cannot be used.
namespace {
[[noreturn]] void no_streams(const char* what) { fail(ErrorKind::Device, what, ": ", kWhy); }
}  // namespace

Stream::~Stream() {}
void Stream::synchronize() const { no_streams("Stream.synchronize"); }
bool Stream::query() const { no_streams("Stream.query"); }
std::shared_ptr<Stream> create_stream(int, int) { no_streams("fg.cuda.Stream"); }
std::shared_ptr<Stream> current_stream(int) { no_streams("fg.cuda.current_stream"); }
std::shared_ptr<Stream> default_stream(int) { no_streams("fg.cuda.default_stream"); }
void set_current_stream(int, StreamHandle) { no_streams("fg.cuda.set_stream"); }
StreamHandle launch_stream() { return 0; }
StreamHandle current_stream_handle(int) { return 0; }
bool capturing(StreamHandle) { return false; }
DeviceGuard::DeviceGuard(int) {}
DeviceGuard::~DeviceGuard() {}
void count_launch() {}
LaunchCount launch_count() { return {}; }
LibraryKernels::LibraryKernels(StreamHandle) {}
LibraryKernels::~LibraryKernels() {}
size_t captured_kernel_nodes(StreamHandle) { return 0; }
size_t kernel_nodes(uintptr_t) { return 0; }
Event::Event(int device, bool timing) : device_(device), timing_(timing) { no_streams("fg.cuda.Event"); }
Event::~Event() {}
void Event::record(StreamHandle) { no_streams("Event.record"); }
void Event::wait(StreamHandle) const { no_streams("Event.wait"); }
void Event::synchronize() const { no_streams("Event.synchronize"); }
bool Event::query() const { no_streams("Event.query"); }
double Event::elapsed_ms(const Event&) const { no_streams("Event.elapsed_time"); }
StreamGuard::StreamGuard(int, StreamHandle) : Scoped(context().streams) { no_streams("fg.cuda.stream"); }
Fork::Fork(int device, int) : device_(device), origin_(0) { no_streams("branches on CUDA streams"); }
Fork::~Fork() {}
void Fork::join() {}

CapturedGraph::~CapturedGraph() {}
void CapturedGraph::launch(StreamHandle) const { no_streams("replaying a CUDA graph"); }
CaptureResult capture(int, const std::function<void(const std::function<void(int)>&)>&) {
  no_streams("CUDA graph capture");
}
std::vector<double> time_steps(int, int, const std::function<void(const std::function<void(int)>&)>&, std::string*,
                               int*) {
  no_streams("profiling a captured step");
}
std::vector<double> time_plain(int, int, const std::function<void(const std::function<void(int)>&)>&) {
  no_streams("profiling a CUDA step");
}

}  // namespace fg::cuda
