// Helpers shared by the layer sources (layers.cpp, norm.cpp, rnn.cpp); not a public header.
#pragma once
#include <sstream>
#include <string>

#include "flowgrad/nn/init.h"
#include "flowgrad/nn/module.h"
#include "flowgrad/ops/autocast.h"
#include "flowgrad/ops/ops.h"

namespace fg::nn::detail {

// Input i of a layer call; ValueError naming the layer when it is missing.
inline const Tensor& input(const Tensors& in, size_t i, const std::string& layer) {
  FG_CHECK(i < in.size() && in[i].defined(), Value, layer, ": expected at least ", i + 1,
           " tensor input(s), got ", in.size());
  return in[i];
}

// Input i, which must have the dtype of the layer's `weight`. PyTorch raises here too: a silent
// cast would hide float64 data that doubles memory and time (or drops precision the other way),
// so the message names both dtypes and the fix instead.
inline const Tensor& typed_input(const Tensors& in, size_t i, const std::string& layer, const Tensor& weight) {
  const Tensor& x = input(in, i, layer);
  if (!weight.defined() || x.dtype() == weight.dtype()) return x;
  // Under autocast float32 and half activations meet float32 or half weights by design.
  auto mixable = [](DType dt) { return dt == DType::Float32 || is_half(dt); };
  if (autocast_state(x.device().type).enabled && mixable(x.dtype()) && mixable(weight.dtype())) return x;
  std::string target = std::string("fg.") + dtype_name(weight.dtype());
  std::string fix = weight.dtype() == DType::Float32 ? "x.float() or x.to(fg.float32)" : "x.to(" + target + ")";
  fail(ErrorKind::DType, layer, ": the input is ", dtype_name(x.dtype()), " but the layer's parameters are ",
       dtype_name(weight.dtype()), "; convert the input with ", fix);
}

// Input i, or an undefined tensor when it is absent or None.
inline Tensor optional_input(const Tensors& in, size_t i) { return i < in.size() ? in[i] : Tensor(); }

// A parameter by name (undefined when None), read at call time so replacements are seen.
inline Tensor param(const Module& m, const std::string& name) {
  const Tensor* p = m.parameter(name);
  return p ? *p : Tensor();
}

// A float32 CPU tensor with U(-bound, bound) entries (PyTorch's default layer init).
inline Tensor uniform_tensor(const Dims& shape, double bound) {
  Tensor t = Tensor::empty(shape, DType::Float32, cpu_device());
  init::uniform_(t, -bound, bound);
  return t;
}

template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

inline const char* py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace fg::nn::detail
