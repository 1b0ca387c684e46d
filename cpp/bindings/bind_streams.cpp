// CUDA streams and events (fg.cuda.Stream, fg.cuda.Event, current_stream, set_stream): argument
// conversion only; cpp/flowgrad/cuda/stream.{h,cu} does the work.
#include "common.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"

namespace fg::py_bind {
namespace {

// None or an int mean that CUDA device; "cuda:1" or fg.device("cuda:1") name it.
int cuda_index(const py::handle& device, const char* what) {
  if (device.is_none()) return 0;
  if (py::isinstance<py::int_>(device)) return device.cast<int>();
  Device d = device_arg(device, Device{DeviceType::CUDA, 0});
  FG_CHECK(d.is_cuda(), Device, what, ": expected a CUDA device, got ", d.str());
  return d.index;
}

cuda::StreamHandle handle_or_current(const py::handle& stream, int device) {
  if (stream.is_none()) return cuda::current_stream(device)->handle;
  auto& s = stream.cast<cuda::Stream&>();
  FG_CHECK(s.device == device, Device, "Event on cuda:", device, " used with a stream of cuda:", s.device);
  return s.handle;
}

}  // namespace

void bind_streams(py::module_& m) {
  using cuda::Event;
  using cuda::Stream;
  // Both classes exist before any method is bound, so signatures name the Python types.
  py::class_<Stream, std::shared_ptr<Stream>> stream(m, "Stream",
      "A CUDA stream: kernels queued on one stream run in order; different streams may overlap. Make it "
      "current with `with fg.cuda.stream(s):`.");
  py::class_<Event, std::shared_ptr<Event>> event(m, "Event",
      "A CUDA event: marks a point in a stream's work; other streams can wait for it, the host can wait for "
      "it, and two timing events measure the GPU time between them.");
  stream.def(py::init([](const py::object& device, int priority) {
             return cuda::create_stream(cuda_index(device, "fg.cuda.Stream"), priority);
           }), py::arg("device") = py::none(), py::arg("priority") = 0,
           "A new stream on a CUDA device (lower priority numbers run first).")
      .def_property_readonly("device", [](const Stream& s) { return Device{DeviceType::CUDA, s.device}; },
                             "The stream's device.")
      .def_property_readonly("cuda_stream", [](const Stream& s) { return s.handle; },
                             "The raw cudaStream_t as an integer (0: the legacy default stream).")
      .def("synchronize", &Stream::synchronize, py::call_guard<py::gil_scoped_release>(),
           "Waits until all work queued on the stream has finished.")
      .def("query", &Stream::query, "True when all work queued on the stream has finished.")
      .def("wait_event", [](const Stream& s, const Event& e) { e.wait(s.handle); }, py::arg("event"),
           "Work queued on this stream from now on waits for the event.")
      .def("wait_stream", [](const Stream& s, const Stream& other) {
             Event e(other.device, false);
             e.record(other.handle);
             e.wait(s.handle);
           }, py::arg("stream"), "Work queued on this stream from now on waits for the work queued on `stream` so far.")
      .def("record_event", [](const Stream& s, std::optional<std::shared_ptr<Event>> given) {
             std::shared_ptr<Event> e = given.value_or(nullptr);
             if (!e) e = std::make_shared<Event>(s.device, false);
             e->record(s.handle);
             return e;
           }, py::arg("event") = py::none(), "Records an event (a new one when None) on the stream and returns it.")
      .def("__eq__", [](const Stream& a, const py::object& b) {
             if (!py::isinstance<Stream>(b)) return false;
             const auto& s = b.cast<const Stream&>();
             return a.device == s.device && a.handle == s.handle;
           })
      .def("__hash__", [](const Stream& s) { return py::hash(py::make_tuple(s.device, s.handle)); })
      .def("__repr__", [](const Stream& s) {
             return "<fg.cuda.Stream device=cuda:" + std::to_string(s.device) + " cuda_stream=" + std::to_string(s.handle) + ">";
           });

  event.def(py::init([](bool enable_timing, const py::object& device) {
             return std::make_shared<Event>(cuda_index(device, "fg.cuda.Event"), enable_timing);
           }), py::arg("enable_timing") = false, py::arg("device") = py::none(),
           "A new event; enable_timing=True lets elapsed_time measure it.")
      .def("record", [](Event& e, const py::object& stream) { e.record(handle_or_current(stream, e.device())); },
           py::arg("stream") = py::none(), "Records the event on a stream (default: the current stream).")
      .def("wait", [](const Event& e, const py::object& stream) { e.wait(handle_or_current(stream, e.device())); },
           py::arg("stream") = py::none(), "Makes a stream (default: the current stream) wait for the event.")
      .def("query", &Event::query, "True when the work before the event has finished.")
      .def("synchronize", &Event::synchronize, py::call_guard<py::gil_scoped_release>(),
           "Waits until the work before the event has finished.")
      .def("elapsed_time", &Event::elapsed_ms, py::arg("end_event"),
           "Milliseconds of GPU time between this event and `end_event` (both recorded, enable_timing=True).")
      .def_property_readonly("device", [](const Event& e) { return Device{DeviceType::CUDA, e.device()}; },
                             "The event's device.");

  m.def("current_stream", [](const py::object& device) { return cuda::current_stream(cuda_index(device, "fg.cuda.current_stream")); },
        py::arg("device") = py::none(), "This thread's current stream on a CUDA device (the default stream unless set).");
  m.def("default_stream", [](const py::object& device) { return cuda::default_stream(cuda_index(device, "fg.cuda.default_stream")); },
        py::arg("device") = py::none(), "The legacy default stream of a CUDA device.");
  m.def("set_stream", [](const Stream& s) { cuda::set_current_stream(s.device, s.handle); }, py::arg("stream"),
        "Makes `stream` this thread's current stream on its device (prefer the fg.cuda.stream context manager).");

  // Tensor.record_stream names Stream in its signature, so it is bound once Stream exists.
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(py::type::of<Tensor>());
  tensor.def("record_stream", [](const Tensor& t, const cuda::Stream& stream) {
        FG_CHECK(t.device().is_cuda(), Device, "record_stream: the tensor is on ", t.device().str(),
                 ", expected a CUDA tensor");
        FG_CHECK(stream.device == t.device().index, Device, "record_stream: the tensor is on ", t.device().str(),
                 " but the stream is on cuda:", stream.device);
        cuda::record_stream(t.storage()->data(), t.device().index, stream.handle);
      }, py::arg("stream"),
           "Marks the tensor's memory as used by work queued on `stream` (PyTorch's semantics): when the tensor is "
           "freed, its block is not reused until the work queued on `stream` by then has finished. Needed when a "
           "tensor allocated on one stream is read or written on another.");
}

}  // namespace fg::py_bind
