// Fused cross-entropy over (n, classes) logits with integer targets, ignore_index and label
// smoothing eps. With lse the row's logsumexp and q the smoothed one-hot,
// q_j = (1 - eps) [j == t] + eps / classes:
//   row loss    = lse - (1 - eps) x_t - eps mean_j x_j   (0 for an ignored row)
//   d loss / dx = (softmax(x) - q) * grad / divisor       (0 for an ignored row)
// where divisor is the count of rows that are not ignored for reduction='mean', else 1.
// Targets are int64; each is ignore_index or in [0, classes) (the op layer checks this on the
// CPU; the CUDA kernels report other values at the next host sync and treat the row as ignored).
#pragma once
#include <cmath>
#include <cstdint>

#include "flowgrad/base/dtype.h"
#include "flowgrad/base/kernel_env.h"
#include "kernels/common/functors.h"

namespace fg {

struct CrossEntropyArgs {
  int64_t rows, classes, ignore_index;
  double smoothing;
};

// The loss of one row that is not ignored, from its logsumexp, target logit and sum of logits.
template <class T>
FG_HD T cross_entropy_row_loss(T lse, T target_logit, T logit_sum, const CrossEntropyArgs& a) {
  T eps = static_cast<T>(a.smoothing);
  T smoothed = a.smoothing > 0 ? eps * logit_sum / static_cast<T>(a.classes) : T(0);  // 0 * -inf is not 0
  return lse - (T(1) - eps) * target_logit - smoothed;
}

// The gradient of one logit of a row that is not ignored; scale = grad / divisor.
template <class T>
FG_HD T cross_entropy_logit_grad(T x, T lse, bool is_target, T scale, const CrossEntropyArgs& a) {
  T eps = static_cast<T>(a.smoothing);
  T q = (is_target ? T(1) - eps : T(0)) + eps / static_cast<T>(a.classes);
  return (fn::exp_nonpositive(x - lse) - q) * scale;
}

// Forward: lse (rows,) and, by reduction, the row losses (rows,) or their sum (reduce = Sum)
// or their mean over the rows not ignored (reduce = Mean) in loss[0]; divisor[0] gets that
// count for Mean and 1 otherwise. Overwrites loss, lse and divisor.
enum class LossReduce : uint8_t { None, Mean, Sum };
void cross_entropy_forward_cpu(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target,
                               const CrossEntropyArgs& args, LossReduce reduce, void* loss,
                               void* lse, void* divisor);
// Backward: grad_logits (rows, classes) from the forward's lse and divisor and the loss's
// gradient grad: (rows,) when per_row (reduction 'none'), else one value. Overwrites.
void cross_entropy_backward_cpu(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target,
                                const void* lse, const void* grad, bool per_row,
                                const void* divisor, const CrossEntropyArgs& args,
                                void* grad_logits);
// CUDA counterparts (CUDA builds only). `row_loss` is (rows,) device scratch for Mean/Sum.
void cross_entropy_forward_cuda(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target,
                                const CrossEntropyArgs& args, LossReduce reduce, void* loss,
                                void* lse, void* divisor, void* row_loss);
void cross_entropy_backward_cuda(const KernelEnv& env, DType dtype, const void* logits, const int64_t* target,
                                 const void* lse, const void* grad, bool per_row,
                                 const void* divisor, const CrossEntropyArgs& args,
                                 void* grad_logits);

}  // namespace fg
