// fg.save / fg.load (safetensors), implemented in C++.
#include "common.h"
#include "flowgrad/io/safetensors.h"

namespace fg::py_bind {
namespace {

// A str's UTF-8 bytes; a str that has none (a lone surrogate such as '\udc80', which
// os.fsdecode makes of undecodable file names) raises CheckpointError naming `what`.
std::string utf8_text(const py::handle& s, const char* what) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(s.ptr(), &size);
  if (!text) {
    PyErr_Clear();
    fail(ErrorKind::Checkpoint, "save: ", what, " ", py::repr(s).cast<std::string>(),
         " is not valid UTF-8 (it holds a lone surrogate), which safetensors requires");
  }
  return std::string(text, static_cast<size_t>(size));
}

io::NamedTensors named_tensors(const py::dict& tensors) {
  io::NamedTensors out;
  for (auto [k, v] : tensors) {
    FG_CHECK(py::isinstance<py::str>(k), Checkpoint, "save: keys must be strings, got ", py::repr(k).cast<std::string>());
    out.emplace_back(utf8_text(k, "tensor name"), as_tensor(v));
  }
  return out;
}

io::Metadata metadata_of(const py::object& metadata) {
  io::Metadata out;
  if (metadata.is_none()) return out;
  FG_CHECK(py::isinstance<py::dict>(metadata), Checkpoint, "save: metadata must be a dict of strings, got ",
           py::repr(py::type::of(metadata)).cast<std::string>());
  for (auto [k, v] : metadata.cast<py::dict>()) {
    FG_CHECK(py::isinstance<py::str>(k) && py::isinstance<py::str>(v), Checkpoint,
             "save: metadata must map strings to strings, got ", py::repr(k).cast<std::string>(), ": ",
             py::repr(v).cast<std::string>());
    out.emplace_back(utf8_text(k, "metadata key"), utf8_text(v, "metadata value"));
  }
  return out;
}

py::tuple as_python(const io::TensorFile& file) {
  py::dict tensors, metadata;
  for (const auto& [name, t] : file.tensors) tensors[py::str(name)] = t;
  for (const auto& [k, v] : file.metadata) metadata[py::str(k)] = v;
  return py::make_tuple(tensors, metadata);
}

}  // namespace

void bind_io(py::module_& m) {
  m.def("_save", [](const py::dict& tensors, const std::string& path, const py::object& metadata) {
    io::NamedTensors named = named_tensors(tensors);
    io::Metadata meta = metadata_of(metadata);
    py::gil_scoped_release release;
    io::save_safetensors(path, named, meta);
  }, py::arg("tensors"), py::arg("path"), py::arg("metadata") = py::none(),
     "Writes tensors (and string metadata) to a safetensors file atomically.");
  m.def("_load", [](const std::string& path) {
    io::TensorFile file;
    {
      py::gil_scoped_release release;
      file = io::load_safetensors(path);
    }
    return as_python(file);
  }, py::arg("path"), "Reads a safetensors file: (tensors dict, metadata dict); CheckpointError on any fault.");
  m.def("_parse_safetensors", [](const py::bytes& data) {
    return as_python(io::parse_safetensors(std::string_view(data), "<bytes>"));
  }, py::arg("data"), "Parses safetensors bytes held in memory (used by the fuzz harness).");
  m.def("_serialize_safetensors", [](const py::dict& tensors, const py::object& metadata) {
    return py::bytes(io::serialize_safetensors(named_tensors(tensors), metadata_of(metadata)));
  }, py::arg("tensors"), py::arg("metadata") = py::none(), "safetensors bytes for tensors.");
}

}  // namespace fg::py_bind
