// Tensor: storage + element offset + shape + strides + dtype. A Tensor is a cheap handle;
// copies share the same TensorImpl (and so the same autograd identity).
#pragma once
#include <memory>

#include "flowgrad/core/device.h"
#include "flowgrad/core/dims.h"
#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "flowgrad/core/storage.h"

namespace fg {

struct AutogradMeta;  // defined by the autograd layer; core only carries the pointer

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Dims shape;
  Dims strides;  // in elements; may be 0 (broadcast) or negative (flip)
  DType dtype = DType::Float32;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A new contiguous tensor with uninitialised memory.
  static Tensor empty(const Dims& shape, DType dtype, Device device);
  // A new contiguous tensor over a shape-only storage (no bytes; see Storage::shape_only).
  static Tensor shape_only(const Dims& shape, DType dtype, Device device);
  // A contiguous tensor over the start of an existing storage of at least its bytes.
  static Tensor over(std::shared_ptr<Storage> storage, const Dims& shape, DType dtype);
  // An uninitialised contiguous tensor for a kernel's own use while it runs (a widened copy, a
  // workspace): from the plan's scratch block (env.scratch) when it is on `device` and has room,
  // else from the allocator (CUDA's orders its reuse after the work queued on the stream). A
  // scratch tensor is valid until the plan's next instruction: never return one as a result.
  static Tensor temporary(const KernelEnv& env, const Dims& shape, DType dtype, Device device);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  const Dims& shape() const { return impl_->shape; }
  const Dims& strides() const { return impl_->strides; }
  int ndim() const { return impl_->shape.size(); }
  int64_t size(int dim) const { return impl_->shape[dim]; }
  int64_t numel() const { return impl_->shape.numel(); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  int64_t offset() const { return impl_->offset; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }

  void* data_ptr() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * itemsize(dtype());
  }
  template <class T> T* data() const { return static_cast<T*>(data_ptr()); }

  bool is_contiguous() const;
  // A view of the same storage with another layout and no autograd history.
  Tensor alias(const Dims& shape, const Dims& strides, int64_t offset) const;
  Tensor alias() const { return alias(shape(), strides(), offset()); }

  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::string describe(const Tensor& t);  // "float32 (2, 3) on cpu", for error messages

// Raises, naming `op`, unless t may be written in place: its memory is not read-only and no
// two of its elements share memory (an expanded view). Every in-place write calls it first.
void check_writable(const Tensor& t, const char* op);
// Marks an in-place write into t's storage; autograd compares versions in backward.
inline void bump_version(const Tensor& t) { t.storage()->bump_version(); }

}  // namespace fg
