// Collectives as registry ops, so a compiled step records them like any other op: the traced
// gradient average of DistributedDataParallel becomes `all_reduce_` instructions between the last
// backward op and the optimizer update. The kernel calls the program's process group and returns
// once the result is in place (MPI: on the communication thread, waited for; NCCL: enqueued on
// the stream flowgrad launches on, so a captured CUDA graph holds the NCCL call).
#include "flowgrad/distributed/collective_ops.h"

#include "flowgrad/ops/raw.h"

namespace fg::dist {
namespace {

// in: the tensor reduced in place (contiguous, on a device the group's transport takes)
Specs all_reduce_shape(TensorList in, const Attrs& attrs) {
  FG_CHECK(in.size() == 1, Value, "all_reduce_: expected 1 input, got ", in.size());
  auto op = static_cast<ReduceOp>(attrs.i("reduce"));
  FG_CHECK(in[0].dtype() != DType::Bool && (op != ReduceOp::Avg || is_floating(in[0].dtype())), DType,
           "all_reduce_: cannot reduce ", describe(in[0]), op == ReduceOp::Avg ? " with 'avg' (floating tensors only)" : "");
  return {{in[0].shape(), in[0].dtype()}};
}

// out[0] is in[0] itself, or (for a strided target) a contiguous temporary that run_op copies back.
void all_reduce_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs& attrs) {
  if (!out[0].is_same(in[0])) raw::copy_into(out[0], in[0]);
  group().all_reduce(out[0], static_cast<ReduceOp>(attrs.i("reduce")), Wait::Blocking)->wait();
}

// kHalfNative: the group stages half tensors through float32 itself and writes the result back.
const OpDef k_all_reduce{.id = OpId::all_reduce_, .name = "all_reduce_", .family = Family::Copy, .flags = kHalfNative,
                         .shape_rule = all_reduce_shape, .cpu = all_reduce_kernel,
                         .cuda = FG_CUDA(all_reduce_kernel), .not_differentiable = "a collective across processes"};

}  // namespace

Tensor all_reduce_(const Tensor& t, ReduceOp op) {
  return run_op1(k_all_reduce, {t}, {{"reduce", static_cast<int64_t>(op)}});
}

}  // namespace fg::dist

namespace fg {
const OpDef* const op_rows::all_reduce_ = &dist::k_all_reduce;  // its row in the op table (ops.def)
}  // namespace fg
