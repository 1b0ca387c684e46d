// Built-in layers. Each reads its parameters by name at forward time, so a parameter replaced
// from Python (m.weight = fg.nn.Parameter(...)) is the one used.
#pragma once
#include <functional>

#include "flowgrad/nn/module.h"

namespace fg::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias);
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  int64_t in_features, out_features;
};

class Embedding : public Module {
 public:
  // padding_idx (-num_embeddings <= p < num_embeddings, kept as p >= 0): that row starts at zero
  // and receives no gradient.
  Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  int64_t num_embeddings, dim;
  std::optional<int64_t> padding_idx;
};

class LayerNorm : public Module {
 public:
  LayerNorm(Dims shape, double eps, bool rms);
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  Dims shape;
  double eps;
  bool rms;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  double p;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias);
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  int64_t in_channels, out_channels, kernel, stride, padding;
};

// Stateless layers: activations, pools, Flatten, Softmax, Identity. The constructor
// arguments are kept (config) and shown by repr.
class Function : public Module {
 public:
  Function(std::string name, std::function<Tensor(const Tensor&)> fn, Config args = {});
  Tensors forward(const Tensors& in) override;
  std::string extra_repr() const override { return format_config(args_); }
  std::optional<Config> config() const override { return args_; }

 private:
  std::function<Tensor(const Tensor&)> fn_;
  Config args_;
};

class RMSNorm : public LayerNorm {
 public:
  RMSNorm(Dims shape, double eps) : LayerNorm(std::move(shape), eps, true) {}
};

// One C++ type per stateless layer, so isinstance(m, fg.nn.ReLU) works from Python.
#define FG_STATELESS_LAYER(NAME) \
  class NAME : public Function { \
   public:                       \
    using Function::Function;    \
  };
FG_STATELESS_LAYER(ReLU)
FG_STATELESS_LAYER(GELU)
FG_STATELESS_LAYER(SiLU)
FG_STATELESS_LAYER(Tanh)
FG_STATELESS_LAYER(Sigmoid)
FG_STATELESS_LAYER(Softmax)
FG_STATELESS_LAYER(Identity)
FG_STATELESS_LAYER(Flatten)
FG_STATELESS_LAYER(MaxPool2d)
FG_STATELESS_LAYER(AvgPool2d)
#undef FG_STATELESS_LAYER

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  void append(std::shared_ptr<Module> m) { register_module(std::to_string(children_.size()), std::move(m)); }
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override { return Config{}; }  // the children are state
};

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void append(std::shared_ptr<Module> m) { register_module(std::to_string(children_.size()), std::move(m)); }
  std::optional<Config> config() const override { return Config{}; }
};

// scaled_dot_product_attention, with autograd's say in the choice: a float mask that requires
// grad needs the (L, S) scores' gradient, which the fused op does not give, so it takes the
// composite. The Python function and MultiheadAttention call this.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, bool is_causal);
// The same over q, k, v packed side by side in qkv (..., T, 3 * heads * D): the packed op unless
// the mask requires grad. Returns (..., heads, T, D).
Tensor attention_packed(const Tensor& qkv, int64_t heads, const Tensor& attn_mask, bool is_causal);

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t dim, int64_t heads, bool causal, double dropout);
  // (x) for self-attention or (query, key, value); an optional attention mask may follow.
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  int64_t dim, heads;
  bool causal;
  double dropout;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t heads, int64_t mlp_ratio, bool causal);
  Tensors forward(const Tensors& in) override;  // pre-norm: x + attn(ln1 x); x + mlp(ln2 x)
  std::optional<Config> config() const override;
  int64_t dim, heads, mlp_ratio;
  bool causal;
};

class GRUCell : public Module {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size);
  Tensors forward(const Tensors& in) override;  // (x, h or None) -> h'
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  int64_t input_size, hidden_size;
};

class LSTMCell : public Module {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size);
  Tensors forward(const Tensors& in) override;  // (x, h or None, c or None) -> (h', c')
  std::optional<Config> config() const override;
  std::string extra_repr() const override;
  int64_t input_size, hidden_size;
};

// Gradient checkpointing: runs the wrapped module without keeping its intermediates and
// recomputes them in backward (same random stream, so dropout masks match).
class Checkpoint : public Module {
 public:
  explicit Checkpoint(std::shared_ptr<Module> inner);
  Tensors forward(const Tensors& in) override;
  std::optional<Config> config() const override { return Config{{"module", child("module")}}; }
};

}  // namespace fg::nn
