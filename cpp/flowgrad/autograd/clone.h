// Copies of leaf tensors for copy.deepcopy and pickling (fg::clone, the recorded copy, is an op:
// ops/shape.cpp).
#pragma once
#include "flowgrad/ops/registry.h"

namespace fg {

// A new leaf with x's values, dtype, device, requires_grad and parameter mark. With
// CopyGrad::Yes its .grad is copied too. x must be a leaf (its history cannot be copied).
enum class CopyGrad : uint8_t { No, Yes };
Tensor copy_leaf(const Tensor& x, CopyGrad grad);

}  // namespace fg
