// Composite nn functions and losses, built only from registered ops: their gradients come
// from the ops' own backward rules.

#include "flowgrad/ops/autocast.h"
#include "flowgrad/ops/raw.h"
#include "flowgrad/ops/ops.h"

namespace fg {
namespace {

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(loss, Dims{}, false);
    case Reduction::Mean: return mean(loss, Dims{}, false);
  }
  return loss;
}

void check_same_shape(const Tensor& x, const Tensor& y, const char* op) {
  FG_CHECK(x.shape() == y.shape(), Shape, op, ": input ", to_string(x.shape()), " and target ",
           to_string(y.shape()), " must have the same shape");
}

// Reads integer targets on the host to name a bad class index before gather would.
void check_targets(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op) {
  FG_CHECK(is_integral(target.dtype()), DType, op, ": class targets must be int32 or int64, got ",
           describe(target));
  Tensor t = raw::contiguous(raw::converted(raw::device_copy(target, cpu_device()), DType::Int64));
  const int64_t* p = t.data<int64_t>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    FG_CHECK(p[i] == ignore_index || (p[i] >= 0 && p[i] < classes), Index, op, ": target ", p[i],
             " is out of range for ", classes, " classes");
}

// Moves the class dim (1) last and flattens: (N, C, d1, ...) -> (N*d1*..., C).
Tensor classes_last(const Tensor& x) {
  if (x.ndim() <= 2) return x;
  std::vector<int64_t> order{0};
  for (int d = 2; d < x.ndim(); ++d) order.push_back(d);
  order.push_back(1);
  return reshape(permute(x, order), {-1, x.shape()[1]});
}

// Negative log-likelihood with ignore_index and label smoothing, from log-probabilities.
Tensor nll_from_logp(const Tensor& logp_in, const Tensor& target, int64_t ignore_index,
                     double smoothing, Reduction reduction, const char* op) {
  FG_CHECK(logp_in.ndim() >= 1, Shape, op, ": input must have a class dim, got a 0-d tensor");
  bool unbatched = logp_in.ndim() == 1;
  Tensor logp = unbatched ? unsqueeze(logp_in, 0) : logp_in;
  Dims expected;
  expected.push_back(logp.shape()[0]);
  for (int d = 2; d < logp.ndim(); ++d) expected.push_back(logp.shape()[d]);
  Tensor tgt = unbatched ? unsqueeze(target, 0) : target;
  FG_CHECK(tgt.shape() == expected, Shape, op, ": target ", to_string(target.shape()),
           " does not match input ", to_string(logp_in.shape()), " (expected ",
           to_string(unbatched ? Dims{} : expected), ")");
  int64_t classes = logp.shape()[1];
  check_targets(tgt, classes, ignore_index, op);
  Tensor flat = classes_last(logp);
  Tensor t = reshape(cast(tgt, DType::Int64), {-1});
  Tensor valid = ne(t, scalar_like(t, static_cast<double>(ignore_index)));
  Tensor safe = where(valid, t, scalar_like(t, 0));
  Tensor picked = reshape(gather(flat, 1, unsqueeze(safe, 1)), {-1});
  Tensor loss = -picked;
  if (smoothing > 0) loss = loss * (1.0 - smoothing) - mean(flat, Dims{1}, false) * smoothing;
  Tensor weight = cast(valid, loss.dtype());
  loss = loss * weight;
  if (reduction == Reduction::Mean) return sum(loss, Dims{}, false) / sum(weight, Dims{}, false);
  if (reduction == Reduction::Sum) return sum(loss, Dims{}, false);
  return reshape(loss, target.shape().vec());
}

}  // namespace

Reduction reduction_from_name(const std::string& name, const char* op) {
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  if (name == "none") return Reduction::None;
  fail(ErrorKind::Value, op, ": reduction must be 'mean', 'sum' or 'none', got '", name, "'");
}

Tensor dropout(const Tensor& x, double p, bool training) {
  FG_CHECK(p >= 0.0 && p <= 1.0, Value, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Tensor keep = ge(rand(x.shape(), is_floating(x.dtype()) ? x.dtype() : DType::Float32, x.device()),
                   scalar_tensor(p, DType::Float64, x.device()));
  return x * cast(keep, x.dtype()) * (1.0 / (1.0 - p));
}

Tensor embedding(const Tensor& index, const Tensor& weight, std::optional<int64_t> padding_idx) {
  FG_CHECK(weight.ndim() == 2, Shape, "embedding: weight must be (num_embeddings, dim), got ",
           to_string(weight.shape()));
  std::vector<int64_t> shape = index.shape().vec();
  shape.push_back(weight.shape()[1]);
  Tensor flat = reshape(index, {-1});
  Tensor rows = index_select(weight, 0, flat);
  if (padding_idx) {  // the same values from a detached copy at padding positions: no gradient there
    const int64_t n = weight.shape()[0], p = *padding_idx;
    FG_CHECK(-n <= p && p < n, Index, "embedding: padding_idx ", p, " is out of range for ", n,
             " embeddings (expected ", -n, " <= padding_idx < ", n, ")");
    Tensor keep = unsqueeze(ne(flat, scalar_tensor(static_cast<double>(p < 0 ? p + n : p), DType::Int64, flat.device())), 1);
    rows = where(keep, rows, rows.alias());  // alias(): the same bytes, no autograd history
  }
  return reshape(rows, shape);
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding) {
  FG_CHECK(x.ndim() == 4 && w.ndim() == 4, Shape, "conv2d: expected input (N, C, H, W) and weight ",
           "(O, C, kH, kW), got ", to_string(x.shape()), " and ", to_string(w.shape()));
  FG_CHECK(x.shape()[1] == w.shape()[1], Shape, "conv2d: input has ", x.shape()[1],
           " channels but weight ", to_string(w.shape()), " expects ", w.shape()[1]);
  int64_t out_ch = w.shape()[0];
  FG_CHECK(!b.defined() || b.shape() == Dims{out_ch}, Shape, "conv2d: bias must be (", out_ch,
           ",), got ", to_string(b.shape()));
  FG_CHECK(x.shape()[2] + 2 * padding >= w.shape()[2] && x.shape()[3] + 2 * padding >= w.shape()[3], Shape,
           "conv2d: kernel ", w.shape()[2], "x", w.shape()[3], " is larger than the padded input ",
           to_string(x.shape()));
  // The conv2d op on the CPU (float32/float64, one dtype, autocast off: its policy would run the
  // product in a half type): each image's columns in a workspace, the gradients ops of their own.
  DType dt = x.dtype();
  if (x.device().is_cpu() && (dt == DType::Float32 || dt == DType::Float64) && w.dtype() == dt &&
      (!b.defined() || b.dtype() == dt) && w.device().is_cpu() && (!b.defined() || b.device().is_cpu()) &&
      !autocast_state(DeviceType::CPU).enabled)
    return conv2d_op(x, w, b, stride, padding);
  Tensor cols = im2col(x, w.shape()[2], w.shape()[3], stride, padding);  // (N, C*kh*kw, L)
  Tensor y = matmul(reshape(w, {out_ch, -1}), cols);                      // (N, O, L)
  int64_t out_h = (x.shape()[2] + 2 * padding - w.shape()[2]) / stride + 1;
  int64_t out_w = (x.shape()[3] + 2 * padding - w.shape()[3]) / stride + 1;
  y = reshape(y, {x.shape()[0], out_ch, out_h, out_w});
  return b.defined() ? y + reshape(b, {1, out_ch, 1, 1}) : y;
}

namespace {
Tensor pool2d(const Tensor& x, int64_t k, int64_t stride, bool is_max) {
  const char* op = is_max ? "max_pool2d" : "avg_pool2d";
  FG_CHECK(x.ndim() == 3 || x.ndim() == 4, Shape, op, ": expected (N, C, H, W) or (C, H, W), got ",
           to_string(x.shape()));
  if (x.ndim() == 3) return squeeze(pool2d(unsqueeze(x, 0), k, stride, is_max), 0);
  if (stride <= 0) stride = k;
  if (is_max && x.device().is_cpu() && (x.dtype() == DType::Float32 || x.dtype() == DType::Float64) && k > 0 &&
      x.shape()[2] >= k && x.shape()[3] >= k)
    return max_pool2d_op(x, k, stride);  // the first maximum's index kept for the backward
  int64_t n = x.shape()[0], c = x.shape()[1];
  Tensor cols = im2col(reshape(x, {n * c, 1, x.shape()[2], x.shape()[3]}), k, k, stride, 0);
  Tensor pooled = is_max ? amax(cols, Dims{1}, false) : mean(cols, Dims{1}, false);
  int64_t out_h = (x.shape()[2] - k) / stride + 1, out_w = (x.shape()[3] - k) / stride + 1;
  return reshape(pooled, {n, c, out_h, out_w});
}
}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t k, int64_t stride) { return pool2d(x, k, stride, true); }
Tensor avg_pool2d(const Tensor& x, int64_t k, int64_t stride) { return pool2d(x, k, stride, false); }

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     double label_smoothing, Reduction reduction) {
  FG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, Value,
           "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  FG_CHECK(logits.ndim() >= 1, Shape, "cross_entropy: logits must have a class dim");
  if (is_floating(target.dtype()) || !is_floating(logits.dtype()))
    return cross_entropy_composite(logits, target, ignore_index, label_smoothing, reduction);
  FG_CHECK(is_integral(target.dtype()), DType, "cross_entropy: class targets must be int32 or int64, got ",
           describe(target));
  Dims expected = logits.shape();
  expected.erase(logits.ndim() == 1 ? 0 : 1);
  FG_CHECK(target.shape() == expected, Shape, "cross_entropy: target ", to_string(target.shape()),
           " does not match input ", to_string(logits.shape()), " (expected ", to_string(expected), ")");
  Tensor t = cast(target, DType::Int64);
  if (logits.ndim() <= 2) return fused_cross_entropy(logits, t, ignore_index, label_smoothing, reduction);
  Tensor loss = fused_cross_entropy(classes_last(logits), reshape(t, {-1}), ignore_index, label_smoothing, reduction);
  return reduction == Reduction::None ? reshape(loss, target.shape().vec()) : loss;
}

Tensor cross_entropy_composite(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                               double label_smoothing, Reduction reduction) {
  FG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, Value,
           "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  FG_CHECK(logits.ndim() >= 1, Shape, "cross_entropy: logits must have a class dim");
  int class_dim = logits.ndim() == 1 ? 0 : 1;
  Tensor logp = log_softmax(logits, class_dim);
  if (is_floating(target.dtype())) {  // class probabilities
    check_same_shape(logits, target, "cross_entropy");
    Tensor probs = label_smoothing > 0
        ? target * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(logits.shape()[class_dim])
        : target;
    return reduce_loss(-sum(probs * logp, Dims{class_dim}, false), reduction);
  }
  return nll_from_logp(logp, target, ignore_index, label_smoothing, reduction, "cross_entropy");
}

Tensor nll_loss(const Tensor& logp, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  return nll_from_logp(logp, target, ignore_index, 0.0, reduction, "nll_loss");
}

Tensor mse_loss(const Tensor& x, const Tensor& y, Reduction reduction) {
  check_same_shape(x, y, "mse_loss");
  return reduce_loss(square(x - y), reduction);
}

Tensor l1_loss(const Tensor& x, const Tensor& y, Reduction reduction) {
  check_same_shape(x, y, "l1_loss");
  return reduce_loss(abs(x - y), reduction);
}

Tensor huber_loss(const Tensor& x, const Tensor& y, double delta, Reduction reduction) {
  check_same_shape(x, y, "huber_loss");
  FG_CHECK(delta > 0, Value, "huber_loss: delta must be positive, got ", delta);
  Tensor d = abs(x - y);
  Tensor quadratic = d * d * 0.5;
  Tensor linear_part = (d - 0.5 * delta) * delta;
  return reduce_loss(where(lt(d, scalar_like(d, delta)), quadratic, linear_part), reduction);
}

Tensor bce_with_logits(const Tensor& x, const Tensor& y, Reduction reduction) {
  check_same_shape(x, y, "binary_cross_entropy_with_logits");
  // max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|
  return reduce_loss(relu(x) - x * y + softplus(-abs(x)), reduction);
}

}  // namespace fg
