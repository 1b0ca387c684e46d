#include "flowgrad/autograd/clone.h"

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/ops/raw.h"

namespace fg {
namespace {

Tensor copy_values(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  raw::copy_into(out, x);
  return out;
}

}  // namespace

Tensor copy_leaf(const Tensor& x, CopyGrad grad) {
  FG_CHECK(is_leaf(x), Value, "copying a tensor: only leaf tensors (made by the user, not by an op that records ",
           "gradients) can be deep-copied or pickled with their autograd flags; use t.detach() first, got one ",
           "made by ", grad_fn(x)->name());
  Tensor out = copy_values(x);
  if (is_parameter(x)) out = make_parameter(out, requires_grad(x));
  else if (requires_grad(x)) set_requires_grad(out, true);
  Tensor g = grad_of(x);
  if (grad == CopyGrad::Yes && g.defined()) set_grad(out, copy_values(g));
  return out;
}

}  // namespace fg
