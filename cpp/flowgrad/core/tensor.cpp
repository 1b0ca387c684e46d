#include "flowgrad/core/tensor.h"

#include "flowgrad/core/allocator.h"

namespace fg {

namespace {
size_t checked_bytes(const Dims& shape, DType dtype) {
  int64_t n = checked_numel(shape);
  size_t item = itemsize(dtype);
  FG_CHECK(n <= static_cast<int64_t>(INT64_MAX / item), OutOfMemory, "cannot allocate ",
           to_string(shape), " of ", dtype_name(dtype), ": byte count overflows");
  return static_cast<size_t>(n) * item;
}

Tensor contiguous_over(std::shared_ptr<Storage> storage, const Dims& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace

Tensor Tensor::empty(const Dims& shape, DType dtype, Device device) {
  return contiguous_over(Storage::allocate(checked_bytes(shape, dtype), device), shape, dtype);
}

Tensor Tensor::over(std::shared_ptr<Storage> storage, const Dims& shape, DType dtype) {
  FG_ASSERT(storage && storage->bytes() >= checked_bytes(shape, dtype));
  return contiguous_over(std::move(storage), shape, dtype);
}

Tensor Tensor::temporary(const KernelEnv& env, const Dims& shape, DType dtype, Device device) {
  const size_t bytes = checked_bytes(shape, dtype);
  if (env.scratch && env.scratch->device == device)
    if (void* p = env.scratch->take(bytes)) return over(Storage::wrap(p, bytes, device, [] {}), shape, dtype);
  return empty(shape, dtype, device);
}

Tensor Tensor::shape_only(const Dims& shape, DType dtype, Device device) {
  return contiguous_over(Storage::shape_only(checked_bytes(shape, dtype), device), shape, dtype);
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

Tensor Tensor::alias(const Dims& shape, const Dims& strides, int64_t offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + to_string(t.shape()) + " on " +
         t.device().str();
}

void check_writable(const Tensor& t, const char* op) {
  FG_CHECK(!t.storage()->read_only(), Value, op, ": cannot write into a read-only tensor (", describe(t),
           " shares memory with a read-only NumPy array or buffer); make a writable copy with fg.tensor(t)");
  for (int d = 0; d < t.ndim(); ++d)
    FG_CHECK(t.strides()[d] != 0 || t.shape()[d] <= 1, Value, op, ": cannot write in place into ", describe(t),
             ": several of its elements share one memory location (dim ", d, " is expanded); write into a "
             "copy made with .contiguous() instead");
}

}  // namespace fg
