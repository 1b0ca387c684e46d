// Collectives as registry ops, so a compiled step records them like any other op: the traced
// gradient average of DistributedDataParallel becomes, per bucket, an `all_reduce_start_` where
// the bucket is packed and an `all_reduce_wait_` before the first read of the result (the
// "overlap collectives" pass moves them there), the eager reducer running the same two ops.
// MPI: start queues the call on the communication thread and returns; wait waits for it. NCCL:
// start enqueues the call on the stream flowgrad launches on (a captured CUDA graph holds it) and
// wait has nothing left to do. `all_reduce_` is both at once, for a caller that waits right away
// (it then runs on the caller's thread when the communication thread is idle).
#include "flowgrad/distributed/collective_ops.h"

#include <map>

#include "flowgrad/ops/raw.h"

namespace fg::dist {
namespace {

// The collectives started and not yet waited for, by the address of the tensor they write; the
// entry keeps that memory alive, so no other tensor takes its address until the wait.
struct Pending {
  WorkPtr work;
  Tensor target;
};
std::mutex g_pending_mutex;
std::map<const void*, Pending> g_pending;

ReduceOp reduce_attr(const Attrs& attrs) { return static_cast<ReduceOp>(attrs.i("reduce")); }

void check_reducible_input(const char* name, TensorList in, ReduceOp op) {
  FG_CHECK(in.size() == 1, Value, name, ": expected 1 input, got ", in.size());
  FG_CHECK(in[0].dtype() != DType::Bool && (op != ReduceOp::Avg || is_floating(in[0].dtype())), DType,
           name, ": cannot reduce ", describe(in[0]), op == ReduceOp::Avg ? " with 'avg' (floating tensors only)" : "");
}

// in: the tensor reduced in place (contiguous, on a device the group's transport takes)
Specs all_reduce_shape(TensorList in, const Attrs& attrs) {
  check_reducible_input("all_reduce_", in, reduce_attr(attrs));
  return {{in[0].shape(), in[0].dtype()}};
}

// An asynchronous write cannot go through a temporary (run_op would copy it back before the
// result is there), so start takes only a target it can write directly.
Specs all_reduce_start_shape(TensorList in, const Attrs& attrs) {
  check_reducible_input("all_reduce_start_", in, reduce_attr(attrs));
  FG_CHECK(in[0].is_contiguous(), Value, "all_reduce_start_: the tensor must be contiguous, got ",
           describe(in[0]), "; reduce a contiguous copy (or use all_reduce_, which waits at once)");
  return {{in[0].shape(), in[0].dtype()}};
}

Specs all_reduce_wait_shape(TensorList in, const Attrs&) {
  FG_CHECK(in.size() == 1, Value, "all_reduce_wait_: expected 1 input, got ", in.size());
  return {{in[0].shape(), in[0].dtype()}};
}

// out[0] is in[0] itself, or (for a strided target) a contiguous temporary that run_op copies back.
void all_reduce_kernel(const KernelEnv&, TensorList in, const Tensors& out, const Attrs& attrs) {
  if (out[0].data_ptr() != in[0].data_ptr()) raw::copy_into(out[0], in[0]);
  group().all_reduce(out[0], reduce_attr(attrs), Wait::Blocking)->wait();
}

// out[0] is in[0] (contiguous, checked by the shape rule).
void all_reduce_start_kernel(const KernelEnv&, TensorList, const Tensors& out, const Attrs& attrs) {
  const void* key = out[0].data_ptr();
  {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    FG_CHECK(!g_pending.count(key), Value, "all_reduce_start_: an all-reduce of this tensor (",
             describe(out[0]), ") is already in flight; call all_reduce_wait_ on it first");
  }
  WorkPtr work = group().all_reduce(out[0], reduce_attr(attrs), Wait::Queued);
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  g_pending.emplace(key, Pending{std::move(work), out[0]});
}

void all_reduce_wait_kernel(const KernelEnv&, TensorList in, const Tensors&, const Attrs&) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    auto it = g_pending.find(in[0].data_ptr());
    FG_CHECK(it != g_pending.end(), Value, "all_reduce_wait_: no all-reduce of this tensor (", describe(in[0]),
             ") was started; call all_reduce_start_ on it first");
    pending = std::move(it->second);
    g_pending.erase(it);  // an error below ends this collective too: its tensor is free again
  }
  pending.work->wait();
}

// kHalfNative: the group stages half tensors through float32 itself and writes the result back.
const OpDef k_all_reduce{.id = OpId::all_reduce_, .name = "all_reduce_", .family = Family::Copy, .flags = kHalfNative,
                         .shape_rule = all_reduce_shape, .cpu = all_reduce_kernel,
                         .cuda = FG_CUDA(all_reduce_kernel), .not_differentiable = "a collective across processes"};
const OpDef k_all_reduce_start{.id = OpId::all_reduce_start_, .name = "all_reduce_start_", .family = Family::Copy,
                               .flags = kHalfNative, .shape_rule = all_reduce_start_shape,
                               .cpu = all_reduce_start_kernel, .cuda = FG_CUDA(all_reduce_start_kernel),
                               .not_differentiable = "a collective across processes"};
const OpDef k_all_reduce_wait{.id = OpId::all_reduce_wait_, .name = "all_reduce_wait_", .family = Family::Copy,
                              .flags = kHalfNative, .shape_rule = all_reduce_wait_shape,
                              .cpu = all_reduce_wait_kernel, .cuda = FG_CUDA(all_reduce_wait_kernel),
                              .not_differentiable = "a collective across processes"};

}  // namespace

Tensor all_reduce_(const Tensor& t, ReduceOp op) {
  return run_op1(k_all_reduce, {t}, {{"reduce", static_cast<int64_t>(op)}});
}

Tensor all_reduce_start_(const Tensor& t, ReduceOp op) {
  return run_op1(k_all_reduce_start, {t}, {{"reduce", static_cast<int64_t>(op)}});
}

Tensor all_reduce_wait_(const Tensor& t) { return run_op1(k_all_reduce_wait, {t}, {}); }

}  // namespace fg::dist

namespace fg {
// their rows in the op table (ops.def)
const OpDef* const op_rows::all_reduce_ = &dist::k_all_reduce;
const OpDef* const op_rows::all_reduce_start_ = &dist::k_all_reduce_start;
const OpDef* const op_rows::all_reduce_wait_ = &dist::k_all_reduce_wait;
}  // namespace fg
