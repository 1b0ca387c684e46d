#include "flowgrad/nn/norm.h"

#include <algorithm>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/nn/layer_util.h"
#include "flowgrad/ops/autocast.h"

namespace fg::nn {

using detail::input;
using detail::param;
using detail::py_bool;
using detail::str;

namespace {

// (x - mean) / sqrt(var + eps) with the biased variance over `dims`.
Tensor normalize(const Tensor& x, const Dims& dims, double eps) {
  Tensor centered = x - mean(x, dims, true);
  return centered * rsqrt(mean(square(centered), dims, true) + eps);
}

// A per-channel vector (C,) shaped (1, C, 1, ...) to broadcast against a rank-`ndim` input.
Tensor per_channel(const Tensor& v, int ndim) {
  std::vector<int64_t> shape(static_cast<size_t>(ndim), 1);
  shape[1] = v.numel();
  return reshape(v, shape);
}

Tensor affine_of(const Module& m, const Tensor& y) {
  Tensor w = param(m, "weight"), b = param(m, "bias");
  Tensor out = w.defined() ? y * per_channel(w, y.ndim()) : y;
  return b.defined() ? out + per_channel(b, y.ndim()) : out;
}

void register_affine(Module& m, int64_t channels, bool affine) {
  m.register_parameter("weight", affine ? ones({channels}, DType::Float32, cpu_device()) : Tensor());
  m.register_parameter("bias", affine ? zeros({channels}, DType::Float32, cpu_device()) : Tensor());
}

// Whether the batch_norm op runs this training step: CPU operands of one float32/float64 dtype,
// autocast off (elsewhere the composition below).
bool fused_batch_norm_applies(const Tensor& x, const Tensor& w, const Tensor& b) {
  const DType dt = x.dtype();
  if (!x.device().is_cpu() || (dt != DType::Float32 && dt != DType::Float64) || autocast_state(DeviceType::CPU).enabled)
    return false;
  for (const Tensor* t : {&w, &b})
    if (t->defined() && (t->dtype() != dt || !t->device().is_cpu())) return false;
  return true;
}

}  // namespace

BatchNorm::BatchNorm(const char* name, std::vector<int64_t> ranks, const char* layout, int64_t c, double e,
                     std::optional<double> m, bool a, bool track)
    : Module(name), num_features(c), eps(e), momentum(m), affine(a), track_running_stats(track),
      ranks_(std::move(ranks)), layout_(layout) {
  FG_CHECK(c > 0, Value, name, ": num_features must be > 0, got ", c);
  FG_CHECK(!m || (*m >= 0 && *m <= 1), Value, name, ": momentum must be in [0, 1] or None, got ", *m);
  register_affine(*this, c, a);
  register_buffer("running_mean", track ? zeros({c}, DType::Float32, cpu_device()) : Tensor());
  register_buffer("running_var", track ? ones({c}, DType::Float32, cpu_device()) : Tensor());
  register_buffer("num_batches_tracked", track ? zeros({}, DType::Int64, cpu_device()) : Tensor());
}

Tensors BatchNorm::forward(const Tensors& in) {
  const Tensor& x = input(in, 0, type_name_);
  FG_CHECK(std::count(ranks_.begin(), ranks_.end(), x.ndim()) && x.shape()[1] == num_features, Shape,
           type_name_, ": expected input ", layout_, " with C = ", num_features, ", got ", to_string(x.shape()));
  Dims dims{0};
  for (int d = 2; d < x.ndim(); ++d) dims.push_back(d);
  int64_t count = x.shape()[0];  // values per channel
  for (int d = 2; d < x.ndim(); ++d) count *= x.shape()[d];
  const Tensor* running_mean = buffer("running_mean");
  const Tensor* running_var = buffer("running_var");
  bool have_running = running_mean && running_mean->defined() && running_var && running_var->defined();
  if (training_ || !have_running) {
    FG_CHECK(!training_ || count > 1, Shape, type_name_, ": expected more than 1 value per channel when ",
             "training, got input ", to_string(x.shape()));
    // The batch statistics once (two reductions), then one scale and shift per channel: y = x *
    // scale + shift is one multiply and one add over x (PyTorch's CPU kernel's form), which compiled
    // plans fuse with a ReLU that follows, and the running update reuses the statistics.
    Tensor w = param(*this, "weight"), b = param(*this, "bias");
    if (fused_batch_norm_applies(x, w, b)) {  // one op: statistics, normalisation and its gradient fused
      Tensors out = batch_norm_train(x, w, b, eps);
      if (training_ && have_running)
        update_running_stats(out[1], out[2] * (static_cast<double>(count) / static_cast<double>(count - 1)));
      return {out[0]};
    }
    Tensor batch_mean = mean(x, dims, true), batch_var = var(x, dims, true, 0.0);
    Tensor scale = rsqrt(batch_var + eps);
    if (w.defined()) scale = scale * per_channel(w, x.ndim());
    Tensor shift = b.defined() ? per_channel(b, x.ndim()) - batch_mean * scale : neg(batch_mean * scale);
    if (training_ && have_running) {
      Dims channels{num_features};
      double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
      update_running_stats(reshape(detach(batch_mean), channels.vec()),
                           reshape(detach(batch_var), channels.vec()) * unbiased);
    }
    return {x * scale + shift};
  }
  Tensor y = (x - per_channel(*running_mean, x.ndim())) * rsqrt(per_channel(*running_var, x.ndim()) + eps);
  return {affine_of(*this, y)};
}

void BatchNorm::update_running_stats(const Tensor& batch_mean, const Tensor& batch_var) {
  const Tensor& running_mean = *buffer("running_mean");
  const Tensor& running_var = *buffer("running_var");
  const DType dtype = running_mean.dtype();
  const double factor = momentum.value_or(0.0);
  Tensor keep = scalar_like(running_mean, 1.0 - factor), take = scalar_like(running_mean, factor);
  if (const Tensor* tracked = buffer("num_batches_tracked"); tracked && tracked->defined()) {
    copy_(*tracked, *tracked + 1.0);
    if (!momentum) {  // cumulative average: 1 / batches in float64 on the device (no host read: it compiles)
      Tensor batches = cast(to_device(*tracked, running_mean.device()), DType::Float64);
      Tensor share = div(scalar_like(batches, 1.0), batches);
      keep = cast(1.0 - share, dtype), take = cast(share, dtype);
    }
  }
  copy_(running_mean, running_mean * keep + cast(batch_mean, dtype) * take);
  copy_(running_var, running_var * keep + cast(batch_var, dtype) * take);
}

std::optional<Config> BatchNorm::config() const {
  return Config{{"num_features", num_features}, {"eps", eps},
                {"momentum", momentum ? ConfigValue(*momentum) : ConfigValue()}, {"affine", affine},
                {"track_running_stats", track_running_stats}};
}

std::string BatchNorm::extra_repr() const {
  std::string m = momentum ? str(*momentum) : "None";
  return str(num_features, ", eps=", eps, ", momentum=", m, ", affine=", py_bool(affine),
             ", track_running_stats=", py_bool(track_running_stats));
}

GroupNorm::GroupNorm(int64_t g, int64_t c, double e, bool a)
    : Module("GroupNorm"), num_groups(g), num_channels(c), eps(e), affine(a) {
  FG_CHECK(g > 0 && c > 0 && c % g == 0, Value, "GroupNorm: num_channels (", c,
           ") must be divisible by num_groups (", g, "), both > 0");
  register_affine(*this, c, a);
}

Tensors GroupNorm::forward(const Tensors& in) {
  const Tensor& x = input(in, 0, type_name_);
  FG_CHECK(x.ndim() >= 2 && x.shape()[1] == num_channels, Shape, "GroupNorm: expected input (N, ",
           num_channels, ", *), got ", to_string(x.shape()));
  int64_t n = x.shape()[0], per_group = n > 0 ? x.numel() / (n * num_groups) : 0;
  Tensor grouped = reshape(x, {n, num_groups, per_group});
  Tensor y = reshape(normalize(grouped, Dims{2}, eps), x.shape().vec());
  return {affine_of(*this, y)};
}

std::optional<Config> GroupNorm::config() const {
  return Config{{"num_groups", num_groups}, {"num_channels", num_channels}, {"eps", eps}, {"affine", affine}};
}

std::string GroupNorm::extra_repr() const {
  return str(num_groups, ", ", num_channels, ", eps=", eps, ", affine=", py_bool(affine));
}

}  // namespace fg::nn
