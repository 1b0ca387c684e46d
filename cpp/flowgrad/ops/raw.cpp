#include "flowgrad/ops/raw.h"

#include "flowgrad/core/allocator.h"
#include "flowgrad/cuda/runtime.h"
#include "flowgrad/cuda/stream.h"
#include "kernels/creation/creation.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/index/index_add.h"

namespace fg::raw {

Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  int rank = std::max(a.size(), b.size());
  Dims out = Dims::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    int ia = a.size() - rank + i, ib = b.size() - rank + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    FG_CHECK(da == db || da == 1 || db == 1, Shape, op, ": shapes ", to_string(a), " and ",
             to_string(b), " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// A contiguous tensor of t's shape: shape-only when t is (fg.compile's trace), else uninitialised.
static Tensor empty_like_layout(const KernelEnv& env, const Tensor& t, DType dtype) {
  return t.storage()->is_shape_only() ? Tensor::shape_only(t.shape(), dtype, t.device())
                                      : Tensor::temporary(env, t.shape(), dtype, t.device());
}

Tensor device_copy(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  if (t.storage()->is_shape_only()) return Tensor::shape_only(t.shape(), t.dtype(), device);
  Tensor src = contiguous(t);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  cuda::copy_bytes(out.data_ptr(), device, src.data_ptr(), src.device(),
                   static_cast<size_t>(t.numel()) * itemsize(t.dtype()));
  return out;
}

void fill(const KernelEnv& env, const Tensor& t, double value) {
  FG_ASSERT(t.is_contiguous());
#if defined(FLOWGRAD_HAVE_CUDA)
  if (t.device().is_cuda()) {
    // The kernels launched from here select their tensor's device (review G3): their callers
    // outside run_op and Executable::execute (a step's input and output copies, the self-check's
    // snapshots, .to()) hold no guard.
    cuda::DeviceGuard on_device(t.device().index);
    return fill_cuda(env, t.dtype(), t.data_ptr(), t.numel(), value);
  }
#endif
  fill_cpu(env, t.dtype(), t.data_ptr(), t.numel(), value);
}

void copy_into(const KernelEnv& env, const Tensor& dst, const Tensor& src) {
  FG_ASSERT(dst.device() == src.device());
  if (dst.storage()->is_shape_only()) return;  // tracing: no bytes to write
  Strided<2> s = strided_over<2>(dst.shape(), {&dst, &src});
#if defined(FLOWGRAD_HAVE_CUDA)
  if (dst.device().is_cuda()) {
    cuda::DeviceGuard on_device(dst.device().index);  // as in fill
    return copy_cuda(env, dst.dtype(), src.dtype(), s);
  }
#endif
  copy_cpu(env, dst.dtype(), src.dtype(), s);
}

Tensor converted(const KernelEnv& env, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty_like_layout(env, t, dtype);
  copy_into(env, out, t);
  return out;
}

Tensor clone(const KernelEnv& env, const Tensor& t) {
  Tensor out = empty_like_layout(env, t, t.dtype());
  copy_into(env, out, t);
  return out;
}

Tensor contiguous(const KernelEnv& env, const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty_like_layout(env, t, t.dtype());
  copy_into(env, out, t);
  return out;
}

Tensor checked_index(const KernelEnv& env, const Tensor& index, int64_t size, const char* op, int dim) {
  FG_CHECK(is_integral(index.dtype()), DType, op, ": index must be int32 or int64, got ",
           dtype_name(index.dtype()));
  Tensor idx = contiguous(env, converted(env, index, DType::Int64));
#if defined(FLOWGRAD_HAVE_CUDA)
  if (index.device().is_cuda()) {  // checked on the device: a bad value raises at the next host sync
    FG_CHECK(size > 0 || idx.numel() == 0, Index, op, ": index is out of range for dimension ", dim,
             " of size 0");
    Tensor wrapped = Tensor::temporary(env, idx.shape(), DType::Int64, idx.device());
    cuda::DeviceGuard on_device(index.device().index);  // as in fill
    wrap_index_cuda(env, idx.data<int64_t>(), idx.numel(), size, index_check_op(op), dim, wrapped.data<int64_t>());
    return wrapped;
  }
#endif
  if (idx.is_same(index)) {  // never modify the caller's tensor when wrapping negatives
    Tensor copy = Tensor::temporary(env, idx.shape(), DType::Int64, idx.device());
    copy_into(env, copy, idx);
    idx = copy;
  }
  int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0, n = idx.numel(); i < n; ++i) {
    FG_CHECK(p[i] >= -size && p[i] < size, Index, op, ": index ", p[i],
             " is out of range for dimension ", dim, " of size ", size);
    if (p[i] < 0) p[i] += size;
  }
  return idx;
}

// Host code outside kernels: the thread's current stream, the allocator.
Tensor converted(const Tensor& t, DType dtype) { return converted(current_env(t.device()), t, dtype); }
Tensor contiguous(const Tensor& t) { return contiguous(current_env(t.device()), t); }
Tensor clone(const Tensor& t) { return clone(current_env(t.device()), t); }
void fill(const Tensor& t, double value) { fill(current_env(t.device()), t, value); }
void copy_into(const Tensor& dst, const Tensor& src) { copy_into(current_env(dst.device()), dst, src); }
Tensor checked_index(const Tensor& index, int64_t size, const char* op, int dim) {
  return checked_index(current_env(index.device()), index, size, op, dim);
}

int64_t span(const Dims& shape, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= shape[d];
  return n;
}

}  // namespace fg::raw
