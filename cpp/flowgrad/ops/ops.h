// The public functional API of the engine. Bindings and backward rules both call these, so
// every gradient is itself built from registered ops.
#pragma once
#include <optional>

#include "flowgrad/ops/registry.h"

namespace fg {

// creation
Tensor full(const Dims& shape, double value, DType dtype, Device device);
Tensor zeros(const Dims& shape, DType dtype, Device device);
Tensor ones(const Dims& shape, DType dtype, Device device);
Tensor scalar_tensor(double value, DType dtype, Device device);  // 0-d
// The value of a one-element tensor (ShapeError otherwise), read on the host.
double item(const Tensor& x);
Tensor arange(double start, double end, double step, DType dtype, Device device);
Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device);
Tensor eye(int64_t n, int64_t m, DType dtype, Device device);
Tensor rand(const Dims& shape, DType dtype, Device device);
Tensor randn(const Dims& shape, DType dtype, Device device);
Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype, Device device);
// A permutation of 0..n-1 decided by (seed, offset) alone: argsort of Philox uniforms.
Tensor randperm(int64_t n, uint64_t seed, uint64_t offset, Device device);

// elementwise: the op table's rows whose api is Generated or Bound (fg::<name>(x) and
// fg::<name>(a, b); bitwise ops take bool and integer tensors only), then the others
#define FG_UNARY(name, Functor, groups, autocast, api, saved, doc) FG_UNARY_DECLARE_##api(name)
#define FG_UNARY_DECLARE_Generated(name) Tensor name(const Tensor& x);
#define FG_UNARY_DECLARE_Bound FG_UNARY_DECLARE_Generated
#define FG_UNARY_DECLARE_Hand(name)
#define FG_BINARY(name, Functor, groups, autocast, api, saved, doc) FG_BINARY_DECLARE_##api(name)
#define FG_BINARY_DECLARE_Generated(name) Tensor name(const Tensor& a, const Tensor& b);
#define FG_BINARY_DECLARE_Bound FG_BINARY_DECLARE_Generated
#define FG_BINARY_DECLARE_Hand(name)
#include "flowgrad/base/ops.def"
#undef FG_UNARY_DECLARE_Generated
#undef FG_UNARY_DECLARE_Bound
#undef FG_UNARY_DECLARE_Hand
#undef FG_BINARY_DECLARE_Generated
#undef FG_BINARY_DECLARE_Bound
#undef FG_BINARY_DECLARE_Hand
Tensor gelu(const Tensor& x, bool tanh_approximation);
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);
// any dtype, nonzero = true; bool results
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);

// Tensor-with-scalar forms: the scalar takes x's dtype (NumPy's weak Python scalars).
Tensor scalar_like(const Tensor& x, double value);
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }
inline Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(b, a), b); }

// reductions; an empty dims list means every dim
Tensor sum(const Tensor& x, const Dims& dims, bool keepdim);
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim);
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim);
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim);
Tensor var(const Tensor& x, const Dims& dims, bool keepdim, double correction);
Tensor std_dev(const Tensor& x, const Dims& dims, bool keepdim, double correction);
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim);
// Running sums along dim (int64 for integer and bool x); the gradient is the reversed running sum.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim);
// (values, indices) along one dim, the index of the first extreme (PyTorch's max(x, dim));
// the gradient goes to that index.
std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim);
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim);
// Sums a broadcast gradient back to `shape`.
Tensor sum_to(const Tensor& g, const Dims& shape);

// linear algebra
Tensor matmul(const Tensor& a, const Tensor& b);

// shape and views
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape);  // one -1 allowed
Tensor view(const Tensor& x, const std::vector<int64_t>& shape);     // never copies
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor expand(const Tensor& x, const std::vector<int64_t>& shape);   // -1 keeps a dim
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t stop, int64_t step);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);  // a contiguous copy that never shares x's memory
Tensor cat(const Tensors& ts, int64_t dim);
Tensor stack(const Tensors& ts, int64_t dim);
Tensors split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
Tensors split_size(const Tensor& x, int64_t size, int64_t dim);
Tensors chunk(const Tensor& x, int64_t chunks, int64_t dim);
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value);
Tensor repeat(const Tensor& x, const std::vector<int64_t>& reps);
// The adjoint of slice: g placed into zeros of `shape` at [start:stop:step] along dim.
Tensor slice_backward(const Tensor& g, const Dims& shape, int64_t dim, int64_t start,
                      int64_t stop, int64_t step);

// indexing
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src's slices added at a 1-D index along dim (repeated indices accumulate).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor one_hot(const Tensor& index, int64_t num_classes);
Tensor nonzero(const Tensor& mask);
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending);
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest);
// (values, indices) of the k-th smallest entry (1-based) along dim.
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim);

// NumPy-style indexing: ints, slices, None, Ellipsis, one integer index tensor or bool mask.
struct IndexItem {
  enum class Kind : uint8_t { Int, Slice, NewAxis, Ellipsis, Tensor } kind;
  int64_t index = 0;                          // Int
  std::optional<int64_t> start, stop, step;   // Slice
  fg::Tensor tensor;                          // Tensor
};
Tensor index(const Tensor& x, const std::vector<IndexItem>& items);

// nn
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// softmax(scale * scores) over the last dim, optionally with the causal mask (key j > query i).
Tensor scaled_softmax(const Tensor& scores, double scale, bool causal);
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps);
// {s, y}: s = x + residual (same shape and dtype) and y = layer_norm(s), in one pass over each row.
Tensors add_layer_norm(const Tensor& x, const Tensor& residual, const Dims& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps);
Tensor rms_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight, double eps);
Tensor im2col(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding);
Tensor col2im(const Tensor& cols, const Dims& image_shape, int64_t kh, int64_t kw,
              int64_t stride, int64_t padding);
// The conv2d op (CPU, float32/float64 operands of one dtype; fg::conv2d below chooses it): x (N, C,
// H, W), w (O, C, kh, kw), b (O) or undefined; square stride and padding. Its gradients in x
// (dy (N, O, out_h, out_w) -> image_shape) and in w (-> weight_shape), themselves ops.
Tensor conv2d_op(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding);
Tensor conv2d_input_grad(const Tensor& dy, const Tensor& w, const Dims& image_shape, int64_t stride, int64_t padding);
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& dy, const Dims& weight_shape, int64_t stride,
                          int64_t padding);
// Training batch norm over x (N, C, ...) (CPU, float32/float64 operands of one dtype; weight and
// bias (C) or undefined): {y, batch mean, biased batch variance}, the statistics (C) detached.
Tensors batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// Its first-order gradient: in = {g, x, [weight], mean, var} -> {dx, dweight, dbias}.
Tensors batch_norm_backward(const Tensors& in, double eps, bool has_weight);
// The max_pool2d op (CPU, float32/float64; fg::max_pool2d chooses it): k x k windows a stride
// apart, no padding; its gradient adds `grad` at each window's first maximum (`index`, int64).
Tensor max_pool2d_op(const Tensor& x, int64_t k, int64_t stride);
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& index, const Dims& image_shape, int64_t k, int64_t stride);

// Recurrent sequences (ops/rnn.cpp), PyTorch's gate order: gi (T, N, 4H or 3H) is x W_ih^T + b_ih of
// every step, h0 and c0 (N, H) the state before the first step, w_hh (4H or 3H, H), b_hh (4H or 3H)
// or undefined; `reverse` runs the steps from T - 1 down. LSTM: {h, c} after each step, (T, N, H)
// each; GRU: h after each step (T, N, H).
Tensors lstm_sequence(const Tensor& gi, const Tensor& h0, const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh,
                      bool reverse);
Tensor gru_sequence(const Tensor& gi, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, bool reverse);

// composites (built from the ops above; no registry entry of their own)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor dropout(const Tensor& x, double p, bool training);
// Rows of weight at index; padding_idx (-rows <= p < rows): those positions give their row's
// values but send it no gradient (PyTorch's padding_idx).
Tensor embedding(const Tensor& index, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding);
Tensor max_pool2d(const Tensor& x, int64_t k, int64_t stride);
Tensor avg_pool2d(const Tensor& x, int64_t k, int64_t stride);
// The fused flash_attention op where it applies (ops/attention.cpp), else the composite below.
// The fused op gives the mask no gradient: a caller whose float mask requires grad takes the
// composite (nn::attention decides, since ops know nothing of autograd).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal);
// Self-attention on a packed projection qkv (..., T, 3 * heads * D) holding q, k, v side by side
// (MultiheadAttention's one Linear): scaled_dot_product_attention of its three (..., heads, T, D)
// head views. On the CPU one fused op reads them in place and writes the gradient of qkv into one
// buffer (no slice_backward, no adds); elsewhere the views go through scaled_dot_product_attention.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t heads, const Tensor& attn_mask,
                                           bool is_causal);
// matmul + softmax, materialising the (..., L, S) scores: the reference for the fused kernels.
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& attn_mask, bool is_causal);
enum class Reduction : uint8_t { None, Mean, Sum };
Reduction reduction_from_name(const std::string& name, const char* op);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     double label_smoothing, Reduction reduction);
// cross_entropy from log_softmax and gather: the reference for the fused op that integer
// targets go through (fused_cross_entropy: logits (N, C) or (C,), int64 target (N,) or ()).
Tensor cross_entropy_composite(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                               double label_smoothing, Reduction reduction);
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           double label_smoothing, Reduction reduction);
Tensor nll_loss(const Tensor& logp, const Tensor& target, int64_t ignore_index, Reduction reduction);
Tensor mse_loss(const Tensor& x, const Tensor& y, Reduction reduction);
Tensor l1_loss(const Tensor& x, const Tensor& y, Reduction reduction);
Tensor huber_loss(const Tensor& x, const Tensor& y, double delta, Reduction reduction);
Tensor bce_with_logits(const Tensor& x, const Tensor& y, Reduction reduction);

// in place: each writes into x (same tensor, same storage), bumps its version and returns x.
// Other operands broadcast to x's shape; the result must cast to x's dtype (same kind).
Tensor add_(const Tensor& x, const Tensor& other);
Tensor sub_(const Tensor& x, const Tensor& other);
Tensor mul_(const Tensor& x, const Tensor& other);
Tensor div_(const Tensor& x, const Tensor& other);
Tensor pow_(const Tensor& x, const Tensor& other);
Tensor neg_(const Tensor& x);
Tensor relu_(const Tensor& x);
Tensor clamp_(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
Tensor fill_(const Tensor& x, double value);
Tensor zero_(const Tensor& x);
Tensor copy_(const Tensor& dst, const Tensor& src);  // any dtype, one device
Tensor masked_fill_(const Tensor& x, const Tensor& mask, double value);
Tensor uniform_(const Tensor& x, double low, double high);
Tensor normal_(const Tensor& x, double mean, double std);
// x.reshape(-1)[positions] = value (broadcast to positions' shape): the op behind x[idx] = value.
Tensor index_put_(const Tensor& x, const Tensor& positions, const Tensor& value);
// x[items] = value for every indexing form that index(x, items) reads.
Tensor assign_index(const Tensor& x, const std::vector<IndexItem>& items, const Tensor& value);

}  // namespace fg
