// Ops that only the plan's epilogue pass makes (plan/passes/fuse_epilogues.cpp), from calls that
// were traced separately: <act>_backward_colsum is an activation's backward followed by the
// column sum of its result (a linear's bias gradient), mul_colsum the same for a multiply of two
// tensors of one shape (the backward of a linear_<act> that kept its derivative). They have no
// gradient of their own.
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"
#include "kernels/nn/fused.h"

namespace fg {
namespace {

// (g, x) of one shape (..., n) -> (dx (..., n), db (n)).
template <OpId Id>
Specs colsum_shape(TensorList in, const Attrs&) {
  const Tensor &g = in[0], &x = in[1];
  FG_CHECK(g.shape() == x.shape() && g.ndim() >= 1, Shape, op_name(Id), ": gradient ", to_string(g.shape()),
           " and input ", to_string(x.shape()), " must have one shape of at least one dim");
  FG_CHECK(is_floating(g.dtype()) && g.dtype() == x.dtype(), DType, op_name(Id), ": expected one floating dtype, got ",
           describe(g), " and ", describe(x));
  return {{g.shape(), g.dtype()}, {Dims{g.shape().back()}, g.dtype()}};
}

template <BinaryFn Fn>
void colsum_kernel(const KernelEnv& env, TensorList in, const Tensors& out, const Attrs&) {
  Tensor g = raw::contiguous(env, in[0]), x = raw::contiguous(env, in[1]);
  int64_t n = g.shape().back(), rows = raw::span(g.shape(), 0, g.ndim() - 1);
  act_backward_colsum_cpu(env, Fn, g.dtype(), g.data_ptr(), x.data_ptr(), out[0].data_ptr(), out[1].data_ptr(), rows, n);
}

template <OpId Id, BinaryFn Fn>
constexpr OpDef colsum_def() {
  return {.id = Id, .name = op_name(Id).data(), .family = Family::NN, .shape_rule = colsum_shape<Id>,
          .cpu = colsum_kernel<Fn>, .cuda_missing = "the plan fuses it on the CPU only (CUDA plans fuse elementwise "
                                                    "chains into generated kernels instead)",
          .not_differentiable = "made by the plan pass fuse_epilogues after the backward is traced"};
}

#define FG_COLSUM(NAME, FN) const OpDef k_##NAME##_backward_colsum = colsum_def<OpId::NAME##_backward_colsum, BinaryFn::FN>();
FG_COLSUM(relu, ReluGrad)
FG_COLSUM(gelu, GeluGrad)
FG_COLSUM(gelu_tanh, GeluTanhGrad)
FG_COLSUM(silu, SiluGrad)
FG_COLSUM(tanh, TanhGrad)
FG_COLSUM(sigmoid, SigmoidGrad)
#undef FG_COLSUM
const OpDef k_mul_colsum = colsum_def<OpId::mul_colsum, BinaryFn::Mul>();

}  // namespace

// Registration of this file's rows of the op table (ops.def).
FG_REGISTER(relu_backward_colsum);
FG_REGISTER(gelu_backward_colsum);
FG_REGISTER(gelu_tanh_backward_colsum);
FG_REGISTER(silu_backward_colsum);
FG_REGISTER(tanh_backward_colsum);
FG_REGISTER(sigmoid_backward_colsum);
FG_REGISTER(mul_colsum);

}  // namespace fg
