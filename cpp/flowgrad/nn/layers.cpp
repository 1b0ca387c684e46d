#include "flowgrad/nn/layers.h"

#include <cmath>
#include <sstream>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/core/runtime.h"
#include "flowgrad/nn/layer_util.h"
#include "flowgrad/nn/rnn.h"
#include "flowgrad/ops/ops.h"

namespace fg::nn {

using detail::input;
using detail::param;
using detail::str;
using detail::uniform_tensor;
using detail::typed_input;

Linear::Linear(int64_t in, int64_t out, bool bias) : Module("Linear"), in_features(in), out_features(out) {
  FG_CHECK(in >= 0 && out >= 0, Value, "Linear: sizes must be >= 0, got ", in, " and ", out);
  double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;  // kaiming_uniform(a=sqrt(5))
  register_parameter("weight", uniform_tensor({out, in}, bound));
  register_parameter("bias", bias ? uniform_tensor({out}, bound) : Tensor());
}
Tensors Linear::forward(const Tensors& in) {
  Tensor w = param(*this, "weight");
  return {linear(typed_input(in, 0, type_name_, w), w, param(*this, "bias"))};
}
std::optional<Config> Linear::config() const {
  const Tensor* b = parameter("bias");
  return Config{{"in_features", in_features}, {"out_features", out_features}, {"bias", b && b->defined()}};
}
std::string Linear::extra_repr() const {
  return str("in_features=", in_features, ", out_features=", out_features, ", bias=", parameter("bias") && parameter("bias")->defined() ? "True" : "False");
}

Embedding::Embedding(int64_t n, int64_t d, std::optional<int64_t> p)
    : Module("Embedding"), num_embeddings(n), dim(d), padding_idx(p) {
  Tensor w = Tensor::empty({n, d}, DType::Float32, cpu_device());
  init::normal_(w, 0.0, 1.0);
  if (p) {
    FG_CHECK(-n <= *p && *p < n, Index, "Embedding: padding_idx ", *p, " is out of range for ", n,
             " embeddings (expected ", -n, " <= padding_idx < ", n, ")");
    padding_idx = *p < 0 ? *p + n : *p;
    float* row = w.data<float>() + *padding_idx * d;
    std::fill(row, row + d, 0.0f);
  }
  register_parameter("weight", w);
}
Tensors Embedding::forward(const Tensors& in) {
  return {embedding(input(in, 0, type_name_), param(*this, "weight"), padding_idx)};
}
std::optional<Config> Embedding::config() const {
  return Config{{"num_embeddings", num_embeddings}, {"embedding_dim", dim},
                {"padding_idx", padding_idx ? ConfigValue(*padding_idx) : ConfigValue()}};
}
std::string Embedding::extra_repr() const {
  return str(num_embeddings, ", ", dim, padding_idx ? str(", padding_idx=", *padding_idx) : std::string());
}

LayerNorm::LayerNorm(Dims s, double e, bool r) : Module(r ? "RMSNorm" : "LayerNorm"), shape(s), eps(e), rms(r) {
  register_parameter("weight", ones(shape, DType::Float32, cpu_device()));
  if (!rms) register_parameter("bias", zeros(shape, DType::Float32, cpu_device()));
}
Tensors LayerNorm::forward(const Tensors& in) {
  const Tensor& x = typed_input(in, 0, type_name_, param(*this, "weight"));
  if (rms) return {rms_norm(x, shape, param(*this, "weight"), eps)};
  return {layer_norm(x, shape, param(*this, "weight"), param(*this, "bias"), eps)};
}
std::optional<Config> LayerNorm::config() const {
  return Config{{"normalized_shape", shape.vec()}, {"eps", eps}};
}
std::string LayerNorm::extra_repr() const { return str(to_string(shape), ", eps=", eps); }

Dropout::Dropout(double prob) : Module("Dropout"), p(prob) {
  FG_CHECK(p >= 0 && p <= 1, Value, "Dropout: p must be in [0, 1], got ", p);
}
Tensors Dropout::forward(const Tensors& in) { return {dropout(input(in, 0, type_name_), p, training_)}; }
std::optional<Config> Dropout::config() const { return Config{{"p", p}}; }
std::string Dropout::extra_repr() const { return str("p=", p); }

Conv2d::Conv2d(int64_t cin, int64_t cout, int64_t k, int64_t s, int64_t pad, bool bias)
    : Module("Conv2d"), in_channels(cin), out_channels(cout), kernel(k), stride(s), padding(pad) {
  FG_CHECK(cin > 0 && cout > 0 && k > 0 && s > 0 && pad >= 0, Value, "Conv2d: invalid configuration (",
           cin, ", ", cout, ", kernel ", k, ", stride ", s, ", padding ", pad, ")");
  double bound = 1.0 / std::sqrt(static_cast<double>(cin * k * k));
  register_parameter("weight", uniform_tensor({cout, cin, k, k}, bound));
  register_parameter("bias", bias ? uniform_tensor({cout}, bound) : Tensor());
}
Tensors Conv2d::forward(const Tensors& in) {
  Tensor w = param(*this, "weight");
  return {conv2d(typed_input(in, 0, type_name_, w), w, param(*this, "bias"), stride, padding)};
}
std::optional<Config> Conv2d::config() const {
  const Tensor* b = parameter("bias");
  return Config{{"in_channels", in_channels}, {"out_channels", out_channels}, {"kernel_size", kernel},
                {"stride", stride}, {"padding", padding}, {"bias", b && b->defined()}};
}
std::string Conv2d::extra_repr() const {
  return str(in_channels, ", ", out_channels, ", kernel_size=", kernel, ", stride=", stride, ", padding=", padding);
}

Function::Function(std::string name, std::function<Tensor(const Tensor&)> fn, Config args)
    : Module(std::move(name)), fn_(std::move(fn)), args_(std::move(args)) {}
Tensors Function::forward(const Tensors& in) { return {fn_(input(in, 0, type_name_))}; }

Tensors Sequential::forward(const Tensors& in) {
  Tensors x = in;
  for (auto& [name, m] : children_) {
    FG_CHECK(m, Value, "Sequential: module '", name, "' is None");
    x = (*m)(x);
  }
  return x;
}

namespace {
// (..., T, D) -> (..., heads, T, D / heads), a view.
Tensor split_heads(const Tensor& t, int64_t heads) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end() - 1);
  shape.push_back(heads);
  shape.push_back(t.shape().back() / heads);
  return transpose(reshape(t, shape), -2, -3);
}
}  // namespace

MultiheadAttention::MultiheadAttention(int64_t d, int64_t h, bool c, double p)
    : Module("MultiheadAttention"), dim(d), heads(h), causal(c), dropout(p) {
  FG_CHECK(d > 0 && h > 0 && d % h == 0, Value, "MultiheadAttention: dim ", d, " must be a positive multiple of heads ", h);
  register_module("qkv", std::make_shared<Linear>(d, 3 * d, true));
  register_module("proj", std::make_shared<Linear>(d, d, true));
}
Tensors MultiheadAttention::forward(const Tensors& in) {
  auto* qkv = static_cast<Linear*>(child("qkv").get());
  const Tensor& x = typed_input(in, 0, type_name_, param(*qkv, "weight"));
  FG_CHECK(x.ndim() >= 2 && x.shape().back() == dim, Shape, "MultiheadAttention: input ",
           to_string(x.shape()), " must be (..., T, ", dim, ")");
  Tensor w = param(*qkv, "weight"), b = param(*qkv, "bias");
  bool self_attention = in.size() < 3 || !in[1].defined();
  Tensor mask = in.size() == 2 ? in[1] : (in.size() > 3 ? in[3] : Tensor());
  auto merge_heads = [&](const Tensor& heads_out) {  // (..., H, T, D/H) -> (..., T, D), projected
    Tensor out = transpose(heads_out, -2, -3);
    std::vector<int64_t> shape(out.shape().begin(), out.shape().end() - 2);
    shape.push_back(dim);
    return (*child("proj"))({reshape(out, shape)});
  };
  // One op reads q, k, v out of the projection, unless attention dropout needs the probabilities
  // or an additive mask wants a gradient (the composite computes the scores' gradient).
  bool mask_grad = mask.defined() && requires_grad(mask);
  if (self_attention && !(dropout > 0 && training_) && !mask_grad)
    return merge_heads(scaled_dot_product_attention_packed(linear(x, w, b), heads, mask, causal));
  Tensor q, k, v;
  if (self_attention) {
    Tensors parts = chunk(linear(x, w, b), 3, -1);
    q = parts[0], k = parts[1], v = parts[2];
  } else {  // separate query/key/value inputs share the packed projection's slices
    Tensors ws = chunk(w, 3, 0), bs = chunk(b, 3, 0);
    q = linear(x, ws[0], bs[0]);
    k = linear(input(in, 1, type_name_), ws[1], bs[1]);
    v = linear(input(in, 2, type_name_), ws[2], bs[2]);
  }
  q = split_heads(q, heads), k = split_heads(k, heads), v = split_heads(v, heads);
  Tensor out;
  if (dropout > 0 && training_) {  // attention dropout needs the probabilities
    Tensor scores = matmul(q, transpose(k, -1, -2)) * (1.0 / std::sqrt(static_cast<double>(dim / heads)));
    int64_t L = q.shape()[q.ndim() - 2], S = k.shape()[k.ndim() - 2];
    if (causal) {
      Tensor rows = reshape(arange(0, static_cast<double>(L), 1, DType::Int64, x.device()), {L, 1});
      Tensor cols = reshape(arange(0, static_cast<double>(S), 1, DType::Int64, x.device()), {1, S});
      scores = masked_fill(scores, gt(cols, rows), -INFINITY);
    }
    if (mask.defined())
      scores = mask.dtype() == DType::Bool ? masked_fill(scores, eq(mask, scalar_like(mask, 0)), -INFINITY) : scores + mask;
    out = matmul(fg::dropout(softmax(scores, -1), dropout, true), v);
  } else {
    out = attention(q, k, v, mask, causal);
  }
  return merge_heads(out);
}
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, bool is_causal) {
  if (attn_mask.defined() && requires_grad(attn_mask))
    return scaled_dot_product_attention_composite(q, k, v, attn_mask, is_causal);
  return scaled_dot_product_attention(q, k, v, attn_mask, is_causal);
}
Tensor attention_packed(const Tensor& qkv, int64_t heads, const Tensor& attn_mask, bool is_causal) {
  if (!attn_mask.defined() || !requires_grad(attn_mask))
    return scaled_dot_product_attention_packed(qkv, heads, attn_mask, is_causal);
  FG_CHECK(qkv.ndim() >= 2 && heads > 0 && qkv.shape().back() % (3 * heads) == 0, Shape,
           "scaled_dot_product_attention_packed: qkv ", to_string(qkv.shape()),
           " must be (..., T, 3 * heads * D) with heads = ", heads);
  Tensors parts = chunk(qkv, 3, -1);
  return scaled_dot_product_attention_composite(split_heads(parts[0], heads), split_heads(parts[1], heads),
                                                split_heads(parts[2], heads), attn_mask, is_causal);
}

std::optional<Config> MultiheadAttention::config() const {
  return Config{{"dim", dim}, {"heads", heads}, {"causal", causal}, {"dropout", dropout}};
}
std::string MultiheadAttention::extra_repr() const {
  return str("dim=", dim, ", heads=", heads, ", causal=", causal ? "True" : "False", ", dropout=", dropout);
}

TransformerBlock::TransformerBlock(int64_t d, int64_t h, int64_t ratio, bool c)
    : Module("TransformerBlock"), dim(d), heads(h), mlp_ratio(ratio), causal(c) {
  register_module("ln1", std::make_shared<LayerNorm>(Dims{d}, 1e-5, false));
  register_module("attn", std::make_shared<MultiheadAttention>(d, h, causal, 0.0));
  register_module("ln2", std::make_shared<LayerNorm>(Dims{d}, 1e-5, false));
  register_module("fc1", std::make_shared<Linear>(d, ratio * d, true));
  register_module("fc2", std::make_shared<Linear>(ratio * d, d, true));
}
std::optional<Config> TransformerBlock::config() const {
  return Config{{"dim", dim}, {"heads", heads}, {"mlp_ratio", mlp_ratio}, {"causal", causal}};
}
Tensors TransformerBlock::forward(const Tensors& in) {
  Tensor x = input(in, 0, type_name_);
  Tensor mask = in.size() > 1 ? in[1] : Tensor();
  x = x + (*child("attn"))({(*child("ln1"))({x})[0], mask})[0];
  Tensor h = gelu((*child("fc1"))((*child("ln2"))({x}))[0], false);
  return {x + (*child("fc2"))({h})[0]};
}

namespace {
void recurrent_params(Module& m, int64_t gates, int64_t in, int64_t hidden) {
  FG_CHECK(in >= 0 && hidden > 0, Value, m.type_name(), ": input_size must be >= 0 and hidden_size > 0, got ", in,
           " and ", hidden);
  double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  m.register_parameter("weight_ih", uniform_tensor({gates * hidden, in}, bound));
  m.register_parameter("weight_hh", uniform_tensor({gates * hidden, hidden}, bound));
  m.register_parameter("bias_ih", uniform_tensor({gates * hidden}, bound));
  m.register_parameter("bias_hh", uniform_tensor({gates * hidden}, bound));
}
Tensor state_or_zeros(const Tensors& in, size_t i, const Tensor& x, int64_t hidden) {
  if (i < in.size() && in[i].defined()) return in[i];
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end() - 1);
  shape.push_back(hidden);
  return zeros(Dims(shape), x.dtype(), x.device());
}
// A cell's step as a sequence op's: the input projection (..., G) as one step (1, batch, G) and a
// state (..., H) as (batch, H), each batch counted from the tensor's own size, so that a state
// that does not match the input reaches the op's shape check.
Tensor one_step(const Tensor& gi) {
  int64_t width = gi.shape().back();
  return reshape(gi, {1, width ? gi.numel() / width : 0, width});
}
Tensor rows(const Tensor& state) {
  int64_t width = state.ndim() ? state.shape().back() : 1;
  return reshape(state, {width ? state.numel() / width : 0, width});
}
}  // namespace

GRUCell::GRUCell(int64_t in, int64_t hidden) : Module("GRUCell"), input_size(in), hidden_size(hidden) {
  recurrent_params(*this, 3, in, hidden);
}
Tensors GRUCell::forward(const Tensors& in) {
  const Tensor& x = typed_input(in, 0, type_name_, param(*this, "weight_ih"));
  Tensor h = state_or_zeros(in, 1, x, hidden_size);
  Tensor gi = one_step(linear(x, param(*this, "weight_ih"), param(*this, "bias_ih")));
  Tensor y = gru_sequence(gi, rows(h), param(*this, "weight_hh"), param(*this, "bias_hh"), false);
  return {reshape(y, h.shape().vec())};
}
std::optional<Config> GRUCell::config() const {
  return Config{{"input_size", input_size}, {"hidden_size", hidden_size}};
}
std::string GRUCell::extra_repr() const { return str(input_size, ", ", hidden_size); }

LSTMCell::LSTMCell(int64_t in, int64_t hidden) : Module("LSTMCell"), input_size(in), hidden_size(hidden) {
  recurrent_params(*this, 4, in, hidden);
}
Tensors LSTMCell::forward(const Tensors& in) {
  const Tensor& x = typed_input(in, 0, type_name_, param(*this, "weight_ih"));
  Tensor h = state_or_zeros(in, 1, x, hidden_size), c = state_or_zeros(in, 2, x, hidden_size);
  Tensor gi = one_step(linear(x, param(*this, "weight_ih"), param(*this, "bias_ih")));
  Tensors states = lstm_sequence(gi, rows(h), rows(c), param(*this, "weight_hh"), param(*this, "bias_hh"), false);
  return {reshape(states[0], h.shape().vec()), reshape(states[1], c.shape().vec())};
}
std::optional<Config> LSTMCell::config() const {
  return Config{{"input_size", input_size}, {"hidden_size", hidden_size}};
}
std::string LSTMCell::extra_repr() const { return str(input_size, ", ", hidden_size); }

Checkpoint::Checkpoint(std::shared_ptr<Module> inner) : Module("Checkpoint") {
  FG_CHECK(inner != nullptr, Value, "Checkpoint: expected a module");
  register_module("module", std::move(inner));
}
Tensors Checkpoint::forward(const Tensors& in) {
  std::shared_ptr<Module> inner = child("module");
  RngState rng = rng_state();  // replayed in backward so random ops (dropout) repeat exactly
  Tensors out;
  {
    GradModeGuard no_grad(false);
    out = (*inner)(in);
  }
  Tensors inputs, params;
  for (const Tensor& t : in)
    if (t.defined()) inputs.push_back(t);
  for (auto& [name, p] : inner->named_parameters()) params.push_back(p);
  Tensors all = inputs;
  all.insert(all.end(), params.begin(), params.end());
  auto backward = [inner, in, params, rng](const Tensors& grads) {
    Tensors fresh;  // detached copies of the inputs that need gradients
    for (const Tensor& t : in) {
      Tensor d = t.defined() ? detach(t) : Tensor();
      if (d.defined() && requires_grad(t)) set_requires_grad(d, true);
      fresh.push_back(d);
    }
    bool create_graph = grad_enabled();  // backward(create_graph=True) runs this with recording on
    Tensors recomputed;
    {
      // Replays the forward's random draws on a private stream: the global generator and the
      // caller's grad mode stay as they were, also when the recomputation throws.
      RngStream replay(rng);
      GradModeGuard on(true);
      recomputed = (*inner)(fresh);
    }
    Tensors targets, roots, root_grads;
    for (const Tensor& t : fresh)
      if (t.defined()) targets.push_back(t);
    targets.insert(targets.end(), params.begin(), params.end());
    for (size_t i = 0; i < recomputed.size(); ++i)
      if (requires_grad(recomputed[i]) && grads[i].defined()) {
        roots.push_back(recomputed[i]);
        root_grads.push_back(grads[i]);
      }
    Tensors wanted, result;
    std::vector<size_t> positions;
    for (size_t i = 0; i < targets.size(); ++i)
      if (requires_grad(targets[i])) {
        positions.push_back(i);
        wanted.push_back(targets[i]);
      }
    result.resize(targets.size());
    if (roots.empty() || wanted.empty()) return result;
    Tensors got = grad(roots, wanted, root_grads, false, create_graph, true);
    for (size_t i = 0; i < positions.size(); ++i) result[positions[i]] = got[i];
    return result;
  };
  return record_custom("checkpoint", all, out, backward);
}

}  // namespace fg::nn
