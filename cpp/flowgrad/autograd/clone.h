// Copies of tensors that own their memory: clone (recorded by autograd, like PyTorch's) and
// copy_leaf (a new leaf with the same flags, for copy.deepcopy and pickling).
#pragma once
#include "flowgrad/ops/registry.h"

namespace fg {

// A contiguous copy with its own memory; gradients flow back to x unchanged.
Tensor clone(const Tensor& x);
// A new leaf with x's values, dtype, device, requires_grad and parameter mark. With
// CopyGrad::Yes its .grad is copied too. x must be a leaf (its history cannot be copied).
enum class CopyGrad : uint8_t { No, Yes };
Tensor copy_leaf(const Tensor& x, CopyGrad grad);

}  // namespace fg
