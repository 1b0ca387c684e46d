// NumPy (zero-copy both ways), the buffer protocol, DLPack producer and consumer, fg.tensor.
#include "common.h"
#include "dlpack_abi.h"
#include "flowgrad/ops/raw.h"

namespace fg::py_bind {
namespace {

DType dtype_of_numpy(const py::dtype& dt) {
  char kind = dt.kind();
  size_t size = dt.itemsize();
  if (kind == 'b' && size == 1) return DType::Bool;
  if (kind == 'u' && size == 1) return DType::UInt8;
  if (kind == 'i' && size == 1) return DType::Int8;
  if (kind == 'i' && size == 2) return DType::Int16;
  if (kind == 'i' && size == 4) return DType::Int32;
  if (kind == 'i' && size == 8) return DType::Int64;
  if (kind == 'f' && size == 2) return DType::Float16;
  if (kind == 'f' && size == 4) return DType::Float32;
  if (kind == 'f' && size == 8) return DType::Float64;
  fail(ErrorKind::DType, "unsupported NumPy dtype ", py::str(dt).cast<std::string>(),
       " (flowgrad holds bool, uint8, int8, int16, int32, int64, float16, float32, float64)");
}

py::dtype numpy_dtype(DType dt) {
  switch (dt) {
    case DType::Bool: return py::dtype("bool");
    case DType::UInt8: return py::dtype("uint8");
    case DType::Int8: return py::dtype("int8");
    case DType::Int16: return py::dtype("int16");
    case DType::Int32: return py::dtype("int32");
    case DType::Int64: return py::dtype("int64");
    case DType::Float16: return py::dtype("float16");
    case DType::Float32: return py::dtype("float32");
    case DType::Float64: return py::dtype("float64");
    default:
      fail(ErrorKind::DType, "NumPy has no ", dtype_name(dt), "; convert first with .float()");
  }
}

const char* buffer_format(DType dt) {
  switch (dt) {
    case DType::Bool: return "?";
    case DType::UInt8: return "B";
    case DType::Int8: return "b";
    case DType::Int16: return "h";
    case DType::Int32: return "i";
    case DType::Int64: return "q";
    case DType::Float16: return "e";
    case DType::Float32: return "f";
    case DType::Float64: return "d";
    default: fail(ErrorKind::DType, "the buffer protocol has no ", dtype_name(dt), "; convert first with .float()");
  }
}

// Shape and byte strides as the buffer protocol and NumPy want them.
std::pair<std::vector<py::ssize_t>, std::vector<py::ssize_t>> byte_layout(const Tensor& t) {
  std::vector<py::ssize_t> shape, strides;
  int64_t item = static_cast<int64_t>(itemsize(t.dtype()));
  for (int d = 0; d < t.ndim(); ++d) {
    shape.push_back(t.shape()[d]);
    strides.push_back(t.strides()[d] * item);
  }
  return {shape, strides};
}

void require_cpu(const Tensor& t, const char* what) {
  FG_CHECK(t.device().is_cpu(), Device, what, ": the tensor is on ", t.device().str(),
           "; call .cpu() first");
}

// ---- DLPack ----

struct ExportContext {  // keeps the tensor alive while a consumer holds the capsule
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

dlpack::DataType dl_dtype(DType dt) {
  switch (dt) {
    case DType::Bool: return {dlpack::kBool, 8, 1};
    case DType::UInt8: return {dlpack::kUInt, 8, 1};
    case DType::Int8: return {dlpack::kInt, 8, 1};
    case DType::Int16: return {dlpack::kInt, 16, 1};
    case DType::Int32: return {dlpack::kInt, 32, 1};
    case DType::Int64: return {dlpack::kInt, 64, 1};
    case DType::Float16: return {dlpack::kFloat, 16, 1};
    case DType::BFloat16: return {dlpack::kBfloat, 16, 1};
    case DType::Float32: return {dlpack::kFloat, 32, 1};
    case DType::Float64: return {dlpack::kFloat, 64, 1};
  }
  return {};
}

DType from_dl_dtype(dlpack::DataType t) {
  FG_CHECK(t.lanes == 1, DType, "from_dlpack: vector dtypes (lanes = ", t.lanes, ") are not supported");
  if (t.code == dlpack::kBool && t.bits == 8) return DType::Bool;
  if (t.code == dlpack::kUInt && t.bits == 8) return DType::UInt8;
  if (t.code == dlpack::kInt && t.bits == 8) return DType::Int8;
  if (t.code == dlpack::kInt && t.bits == 16) return DType::Int16;
  if (t.code == dlpack::kInt && t.bits == 32) return DType::Int32;
  if (t.code == dlpack::kInt && t.bits == 64) return DType::Int64;
  if (t.code == dlpack::kFloat && t.bits == 16) return DType::Float16;
  if (t.code == dlpack::kBfloat && t.bits == 16) return DType::BFloat16;
  if (t.code == dlpack::kFloat && t.bits == 32) return DType::Float32;
  if (t.code == dlpack::kFloat && t.bits == 64) return DType::Float64;
  fail(ErrorKind::DType, "from_dlpack: unsupported DLPack dtype (code ", int(t.code), ", bits ",
       int(t.bits), ")");
}

void fill_dl_tensor(dlpack::DLTensor& dl, ExportContext* ctx) {
  const Tensor& t = ctx->tensor;
  ctx->shape = t.shape().vec();
  ctx->strides = t.strides().vec();
  dl.data = t.data_ptr();
  dl.device = {t.device().is_cpu() ? dlpack::kCPU : dlpack::kCUDA, t.device().is_cpu() ? 0 : t.device().index};
  dl.ndim = t.ndim();
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
}

// Wraps the tensor in a managed DLPack struct (legacy or versioned) inside a capsule that frees
// it unless a consumer renamed the capsule to "used_...".
template <class Managed>
py::capsule make_capsule(const Tensor& t, const char* name) {
  auto* managed = new Managed{};
  auto* ctx = new ExportContext{detach(t), {}, {}};
  if constexpr (std::is_same_v<Managed, dlpack::ManagedTensorVersioned>) {
    managed->version = {1, 0};
    managed->flags = t.storage()->read_only() ? dlpack::kFlagReadOnly : 0;
  } else {  // a legacy capsule cannot say read-only, and its consumer may write (NumPy refuses too)
    FG_CHECK(!t.storage()->read_only(), Value, "__dlpack__: a read-only tensor can only be exported as a "
             "versioned DLPack capsule (max_version >= (1, 0)); copy it with fg.tensor(t) first");
  }
  managed->manager_ctx = ctx;
  managed->deleter = [](Managed* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  fill_dl_tensor(managed->dl_tensor, ctx);
  return py::capsule(managed, name, [](PyObject* cap) {
    const char* unused = std::is_same_v<Managed, dlpack::ManagedTensorVersioned> ? "dltensor_versioned" : "dltensor";
    if (PyCapsule_IsValid(cap, unused)) {  // never consumed: we still own it
      auto* m = static_cast<Managed*>(PyCapsule_GetPointer(cap, unused));
      m->deleter(m);
    }
  });
}

py::capsule export_dlpack(const Tensor& t, bool versioned) {
  return versioned ? make_capsule<dlpack::ManagedTensorVersioned>(t, "dltensor_versioned")
                   : make_capsule<dlpack::ManagedTensor>(t, "dltensor");
}

Tensor wrap_dl_tensor(const dlpack::DLTensor& dl, bool read_only, std::function<void()> release) {
  Device device;
  if (dl.device.device_type == dlpack::kCUDA) device = Device{DeviceType::CUDA, dl.device.device_id};
  else FG_CHECK(dl.device.device_type == dlpack::kCPU || dl.device.device_type == dlpack::kCUDAHost,
                Device, "from_dlpack: unsupported DLPack device type ", dl.device.device_type);
  DType dt = from_dl_dtype(dl.dtype);
  Dims shape(std::vector<int64_t>(dl.shape, dl.shape + dl.ndim));
  Dims strides = dl.strides ? Dims(std::vector<int64_t>(dl.strides, dl.strides + dl.ndim))
                            : contiguous_strides(shape);
  char* base = static_cast<char*>(dl.data) + dl.byte_offset;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(base, 0, device, std::move(release));
  if (read_only) impl->storage->mark_read_only();
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dt;
  return Tensor(std::move(impl));
}

// Byte order: from_numpy and from_dlpack share memory, and flowgrad's kernels read native-order
// values, so a non-native array cannot be shared; a silent copy would break the sharing they
// promise (writes would no longer reach the array). They raise, as torch.from_numpy does, and
// name fg.tensor, which copies and converts.
bool native_byte_order(const py::object& dtype) {
  return !py::hasattr(dtype, "isnative") || dtype.attr("isnative").cast<bool>();
}

void require_native(const py::object& dtype, const char* op) {
  FG_CHECK(native_byte_order(dtype), DType, op, ": dtype ", py::repr(dtype).cast<std::string>(),
           " is not in the machine's byte order and memory cannot be shared byte-swapped; use fg.tensor(array) "
           "(a converted copy) or array.astype(array.dtype.newbyteorder('='))");
}

Tensor import_dlpack(const py::object& obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  FG_CHECK(py::hasattr(obj, "__dlpack__"), Value, "from_dlpack: ", py::repr(py::type::of(obj)).cast<std::string>(),
           " has no __dlpack__ method");
  if (py::hasattr(obj, "dtype")) require_native(obj.attr("dtype"), "from_dlpack");  // NumPy refuses with BufferError
  py::object cap;
  try {
    cap = obj.attr("__dlpack__")(py::arg("max_version") = py::make_tuple(1, 0));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    cap = obj.attr("__dlpack__")();  // a producer that predates versioned capsules
  }
  PyObject* p = cap.ptr();
  if (PyCapsule_IsValid(p, "dltensor_versioned")) {
    auto* m = static_cast<dlpack::ManagedTensorVersioned*>(PyCapsule_GetPointer(p, "dltensor_versioned"));
    FG_CHECK(m->version.major == 1, Value, "from_dlpack: DLPack version ", m->version.major, ".",
             m->version.minor, " is not supported (expected 1.x)");
    Tensor t = wrap_dl_tensor(m->dl_tensor, m->flags & dlpack::kFlagReadOnly, [m] { if (m->deleter) m->deleter(m); });
    PyCapsule_SetName(p, "used_dltensor_versioned");
    return t;
  }
  FG_CHECK(PyCapsule_IsValid(p, "dltensor"), Value,
           "from_dlpack: __dlpack__ returned no unused DLPack capsule");
  auto* m = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(p, "dltensor"));
  Tensor t = wrap_dl_tensor(m->dl_tensor, false, [m] { if (m->deleter) m->deleter(m); });
  PyCapsule_SetName(p, "used_dltensor");
  return t;
}

}  // namespace

Tensor from_numpy(const py::array& array) {
  DType dt = dtype_of_numpy(array.dtype());
  require_native(array.dtype(), "from_numpy");
  int64_t item = static_cast<int64_t>(itemsize(dt));
  Dims shape, strides;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    shape.push_back(array.shape(d));
    FG_CHECK(array.strides(d) % item == 0, Value, "from_numpy: stride ", array.strides(d),
             " bytes is not a multiple of the item size ", item);
    strides.push_back(array.strides(d) / item);
  }
  // The storage spans from the lowest to the highest address the array touches.
  char* data = static_cast<char*>(const_cast<void*>(array.data()));
  int64_t low = 0;
  for (int d = 0; d < shape.size(); ++d)
    if (strides[d] < 0 && shape[d] > 0) low += strides[d] * (shape[d] - 1);
  py::object keep = array;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(data + low * item, 0, cpu_device(), [keep]() mutable {
    py::gil_scoped_acquire gil;
    keep = py::object();
  });
  if (!array.writeable()) impl->storage->mark_read_only();
  impl->offset = -low;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dt;
  return Tensor(std::move(impl));
}

py::array to_numpy(const Tensor& t) {
  require_cpu(t, "numpy");
  notify_host_read(t, "numpy");
  auto [shape, strides] = byte_layout(t);
  auto* keep = new std::shared_ptr<Storage>(t.storage());
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  py::array array(numpy_dtype(t.dtype()), shape, strides, t.data_ptr(), owner);
  if (t.storage()->read_only()) array.attr("setflags")(py::arg("write") = false);
  return array;
}

Tensor tensor_from_data(const py::handle& data, std::optional<DType> dtype, Device device) {
  Tensor src;
  if (py::isinstance<Tensor>(data)) {
    src = data.cast<Tensor>();
  } else {
    bool python_data = !py::isinstance<py::array>(data);
    py::array array = py::array::ensure(data);
    FG_CHECK(array, Value, "tensor: cannot convert ", py::repr(py::type::of(data)).cast<std::string>(),
             " to a tensor");
    if (!native_byte_order(array.dtype())) array = array.attr("astype")(array.dtype().attr("newbyteorder")("="));
    src = from_numpy(array);
    // Python floats give the default float dtype, float32 unless set (NumPy would say float64).
    if (python_data && !dtype && src.dtype() == DType::Float64) dtype = default_float_dtype();
  }
  // Always a copy: converted where src lives, then moved (fg.tensor(cuda_tensor) copies too).
  Tensor out = Tensor::empty(src.shape(), dtype.value_or(src.dtype()), src.device());
  raw::copy_into(out, src);
  return to_device(out, device);
}

void bind_interop(py::module_& m, py::class_<Tensor>& cls) {
  cls.def_buffer([](const Tensor& t) {
    require_cpu(t, "buffer protocol");
    auto [shape, strides] = byte_layout(t);
    return py::buffer_info(t.data_ptr(), static_cast<py::ssize_t>(itemsize(t.dtype())),
                           buffer_format(t.dtype()), t.ndim(), shape, strides, t.storage()->read_only());
  });
  cls.def("numpy", &to_numpy, "A NumPy array sharing this CPU tensor's memory (no copy).")
      .def("__array__", [](const Tensor& t, const py::object& dtype, const py::object& copy) {
        py::array a = to_numpy(t);
        if (!dtype.is_none()) a = a.attr("astype")(dtype);
        if (!copy.is_none() && copy.cast<bool>()) a = a.attr("copy")();
        return a;
      }, py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("tolist", [](const Tensor& t) {
        Tensor c = t.dtype() == DType::BFloat16 ? raw::converted(t, DType::Float32) : t;
        return to_numpy(c).attr("tolist")();
      }, "Nested Python lists of the values.")
      .def("__dlpack__", [](const Tensor& t, const py::object& stream, const py::object& max_version,
                            const py::object& dl_device, const py::object& copy) {
        bool versioned = !max_version.is_none() && max_version.cast<py::tuple>()[0].cast<int>() >= 1;
        FG_CHECK(copy.is_none() || !copy.cast<bool>(), Value, "__dlpack__: copy=True is not supported; ",
                 "use .to(...) first");
        (void)stream;
        (void)dl_device;
        return export_dlpack(t, versioned);
      }, py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
         py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
         "Exports the tensor as a DLPack capsule (versioned when max_version >= (1, 0)).")
      .def("__dlpack_device__", [](const Tensor& t) {
        return py::make_tuple(t.device().is_cpu() ? int(dlpack::kCPU) : int(dlpack::kCUDA),
                              t.device().is_cpu() ? 0 : t.device().index);
      }, "(device_type, device_id) in DLPack's codes.");

  def_op(m, "from_numpy", &from_numpy, py::arg("array"),
         "A tensor sharing the NumPy array's memory (no copy; keeps the array alive). A read-only array "
         "(np.frombuffer of bytes, a read-only mmap, writeable=False) gives a read-only tensor: reading it "
         "and out-of-place ops work, in-place writes raise InvalidArgumentError; fg.tensor(a) copies "
         "into a writable tensor.");
  def_op(m, "from_dlpack", &import_dlpack, py::arg("obj"),
         "A tensor sharing the memory of any object that implements __dlpack__. A capsule marked "
         "read-only gives a read-only tensor, as from_numpy does.");
  def_op(m, "tensor", [](const py::object& data, const py::object& dtype, const py::object& device, bool rg) {
    Tensor t = tensor_from_data(data, dtype_arg(dtype), device_arg(device));
    if (rg) set_requires_grad(t, true);
    return t;
  }, py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
     py::arg("requires_grad") = false,
     "A new tensor copied from a list, scalar, NumPy array or tensor. Python floats give the default "
     "float dtype (float32 unless fg.set_default_dtype).");
}

}  // namespace fg::py_bind
