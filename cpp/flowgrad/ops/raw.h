// Raw tensor work shared by the op families: kernel arguments (broadcast shapes, strided views,
// checked indices) and copies that run inside kernels. Nothing here records autograd or goes
// through run_op, so every call site says raw:: where it steps around the op registry.
#pragma once
#include <array>

#include "flowgrad/ops/registry.h"
#include "kernels/common/strided.h"

namespace fg::raw {

// Broadcast shape of two shapes, NumPy rules; `op` names the caller in the ShapeError.
Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op);

// Operands viewed over `shape` (right-aligned broadcasting: stride 0 on broadcast dims).
template <int N>
Strided<N> strided_over(const Dims& shape, const std::array<const Tensor*, N>& ts) {
  Strided<N> s;
  s.ndim = shape.size();
  for (int d = 0; d < s.ndim; ++d) s.shape[d] = shape[d];
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *ts[k];
    s.data[k] = static_cast<char*>(t.data_ptr());
    int64_t item = static_cast<int64_t>(itemsize(t.dtype()));
    int lead = s.ndim - t.ndim();
    for (int d = 0; d < s.ndim; ++d) {
      int td = d - lead;
      bool broadcast = td < 0 || (t.shape()[td] == 1 && shape[d] != 1);
      s.strides[k][d] = broadcast ? 0 : t.strides()[td] * item;
    }
  }
  return s;
}

// Kernel work takes the KernelEnv of its launch: the stream its copies run on and the scratch
// block its temporaries come from (a compiled plan's, reset before each instruction; null in
// eager mode: the allocator). The overloads without one are for host code outside kernels
// (autograd, distributed, plan set-up): they use the thread's current stream and the allocator.

// A copy of t converted to dtype (t itself when it already has it). No autograd.
Tensor converted(const KernelEnv& env, const Tensor& t, DType dtype);
Tensor converted(const Tensor& t, DType dtype);
// t when contiguous, else a contiguous copy. No autograd.
Tensor contiguous(const KernelEnv& env, const Tensor& t);
Tensor contiguous(const Tensor& t);
// A new contiguous copy of t that shares no memory with it. No autograd.
Tensor clone(const KernelEnv& env, const Tensor& t);
Tensor clone(const Tensor& t);
// t's values on `device` as a contiguous tensor (t itself when it is already there). No autograd.
Tensor device_copy(const Tensor& t, Device device);
// Sets every element of a contiguous tensor (on its device). No autograd.
void fill(const KernelEnv& env, const Tensor& t, double value);
void fill(const Tensor& t, double value);
// Copies src into dst (same shape up to broadcasting), converting dtype. No autograd.
void copy_into(const KernelEnv& env, const Tensor& dst, const Tensor& src);
void copy_into(const Tensor& dst, const Tensor& src);
// Index tensor as contiguous int64 with negatives wrapped; IndexError outside [-size, size): at
// once on the CPU, at the next host synchronisation on CUDA (see flowgrad/base/device_error.h).
Tensor checked_index(const KernelEnv& env, const Tensor& index, int64_t size, const char* op, int dim);
Tensor checked_index(const Tensor& index, int64_t size, const char* op, int dim);
// Product of shape[begin:end].
int64_t span(const Dims& shape, int begin, int end);

}  // namespace fg::raw
