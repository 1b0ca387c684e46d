// fg.nn.init: in-place initialisers (run without recording autograd), seeded by fg.manual_seed.
#pragma once
#include <string>

#include "flowgrad/core/tensor.h"

namespace fg::nn::init {

void uniform_(const Tensor& t, double low, double high);
void normal_(const Tensor& t, double mean, double std);
void constant_(const Tensor& t, double value);
// fan_in/fan_out as PyTorch computes them: dims 1 and 0 times the receptive field size.
std::pair<int64_t, int64_t> fans(const Tensor& t);
double gain(const std::string& nonlinearity, double param);
void xavier_uniform_(const Tensor& t, double gain);
void xavier_normal_(const Tensor& t, double gain);
void kaiming_uniform_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity);
void kaiming_normal_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity);

}  // namespace fg::nn::init
