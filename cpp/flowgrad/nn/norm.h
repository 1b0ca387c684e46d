// Batch and group normalisation with PyTorch's semantics, built from registered ops (so they
// run on every device and differentiate through autograd).
#pragma once
#include <optional>
#include <vector>

#include "flowgrad/nn/module.h"

namespace fg::nn {

// Normalises each channel (dim 1) over the batch and any trailing dims. Training uses the
// batch statistics (biased variance) and, with track_running_stats, updates running_mean and
// running_var (unbiased variance) by `momentum`, or by a cumulative average when momentum is
// none. Evaluation uses the running statistics; without them it keeps using the batch's.
class BatchNorm : public Module {
 public:
  BatchNorm(const char* name, std::vector<int64_t> ranks, const char* layout, int64_t num_features,
            double eps, std::optional<double> momentum, bool affine, bool track_running_stats);
  Tensors forward(const Tensors& in) override;
  std::string extra_repr() const override;
  std::optional<Config> config() const override;
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;

 private:
  void update_running_stats(const Tensor& batch_mean, const Tensor& batch_var);
  std::vector<int64_t> ranks_;  // accepted input ranks
  const char* layout_;          // the accepted layouts, for messages: "(N, C) or (N, C, L)"
};

class BatchNorm1d : public BatchNorm {
 public:
  BatchNorm1d(int64_t num_features, double eps, std::optional<double> momentum, bool affine, bool track)
      : BatchNorm("BatchNorm1d", {2, 3}, "(N, C) or (N, C, L)", num_features, eps, momentum, affine, track) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  BatchNorm2d(int64_t num_features, double eps, std::optional<double> momentum, bool affine, bool track)
      : BatchNorm("BatchNorm2d", {4}, "(N, C, H, W)", num_features, eps, momentum, affine, track) {}
};

// Splits the channels (dim 1) of (N, C, *) into num_groups groups and normalises each group of
// each sample over its channels and trailing dims; weight and bias are per channel.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine);
  Tensors forward(const Tensors& in) override;
  std::string extra_repr() const override;
  std::optional<Config> config() const override;
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
};

}  // namespace fg::nn
