#include "flowgrad/nn/init.h"

#include <cmath>

#include "flowgrad/autograd/autograd.h"
#include "flowgrad/ops/ops.h"

namespace fg::nn::init {

void uniform_(const Tensor& t, double low, double high) {
  GradModeGuard no_grad(false);
  fg::uniform_(t, low, high);
}

void normal_(const Tensor& t, double mean, double std) {
  GradModeGuard no_grad(false);
  fg::normal_(t, mean, std);
}

void constant_(const Tensor& t, double value) {
  GradModeGuard no_grad(false);
  fill_(t, value);
}

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  FG_CHECK(t.ndim() >= 2, Shape, "init: fan in and fan out need a tensor of at least 2 dims, got ",
           to_string(t.shape()));
  int64_t receptive = 1;
  for (int d = 2; d < t.ndim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

double gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "sigmoid" || nonlinearity.rfind("conv", 0) == 0) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 0.75;
  fail(ErrorKind::Value, "init: unknown nonlinearity '", nonlinearity, "'");
}

void xavier_uniform_(const Tensor& t, double g) {
  auto [fan_in, fan_out] = fans(t);
  double bound = g * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  init::uniform_(t, -bound, bound);
}

void xavier_normal_(const Tensor& t, double g) {
  auto [fan_in, fan_out] = fans(t);
  init::normal_(t, 0.0, g * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

namespace {
double kaiming_std(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  auto [fan_in, fan_out] = fans(t);
  FG_CHECK(mode == "fan_in" || mode == "fan_out", Value, "init: mode must be 'fan_in' or 'fan_out', got '", mode, "'");
  int64_t fan = mode == "fan_in" ? fan_in : fan_out;
  return gain(nonlinearity, a) / std::sqrt(static_cast<double>(std::max<int64_t>(fan, 1)));
}
}  // namespace

void kaiming_uniform_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  init::uniform_(t, -bound, bound);
}

void kaiming_normal_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  init::normal_(t, 0.0, kaiming_std(t, a, mode, nonlinearity));
}

}  // namespace fg::nn::init
