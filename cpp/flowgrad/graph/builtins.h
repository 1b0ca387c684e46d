// The modules of fg.flow: merges (Add, Mean, Cat), Reshape, routers for gate (weights
// [..., n]), selectors for switch (a branch index), halts for loops (a scalar; > 0 stops) and
// StateAdd for recurrent state.
#pragma once
#include <memory>
#include <vector>

#include "flowgrad/nn/layers.h"

namespace fg::graph {

class Add : public nn::Module {
 public:
  Add() : Module("Add") {}
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override { return nn::Config{}; }
};

class Mean : public nn::Module {
 public:
  Mean() : Module("Mean") {}
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override { return nn::Config{}; }
};

class Cat : public nn::Module {
 public:
  explicit Cat(int64_t dim) : Module("Cat"), dim(dim) {}
  Tensors forward(const Tensors& in) override;
  std::string extra_repr() const override;
  std::optional<nn::Config> config() const override { return nn::Config{{"dim", dim}}; }
  int64_t dim;
};

class Reshape : public nn::Module {
 public:
  explicit Reshape(std::vector<int64_t> shape) : Module("Reshape"), shape(std::move(shape)) {}
  Tensors forward(const Tensors& in) override;
  std::string extra_repr() const override;
  std::optional<nn::Config> config() const override { return nn::Config{{"shape", shape}}; }
  std::vector<int64_t> shape;
};

// Linear(in_dim, n) followed by softmax (SoftmaxRouter) or sigmoid (SigmoidRouter).
class Router : public nn::Module {
 public:
  Router(const char* name, int64_t in_dim, int64_t n, bool softmax);
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override;
  std::string extra_repr() const override;

 private:
  bool softmax_;
};

class SoftmaxRouter : public Router {
 public:
  SoftmaxRouter(int64_t in_dim, int64_t n) : Router("SoftmaxRouter", in_dim, n, true) {}
};

class SigmoidRouter : public Router {
 public:
  SigmoidRouter(int64_t in_dim, int64_t n) : Router("SigmoidRouter", in_dim, n, false) {}
};

// Linear(in_dim, n) scores averaged over the batch; the branch with the highest mean score.
class ArgmaxSelector : public nn::Module {
 public:
  ArgmaxSelector(int64_t in_dim, int64_t n);
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override;
  std::string extra_repr() const override;
};

class FixedSelector : public nn::Module {
 public:
  explicit FixedSelector(int64_t index);
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override;
  std::string extra_repr() const override;
  int64_t index;
};

// mean(Linear(in_dim, 1)(x)): a learned halting score.
class LearnedHalt : public nn::Module {
 public:
  explicit LearnedHalt(int64_t in_dim);
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override;
  std::string extra_repr() const override;
};

// mean(x) - threshold: stops once the mean passes the threshold.
class ThresholdHalt : public nn::Module {
 public:
  explicit ThresholdHalt(double threshold) : Module("ThresholdHalt"), threshold(threshold) {}
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override;
  std::string extra_repr() const override;
  double threshold;
};

// x + state (the state is zeros on the first call).
class StateAdd : public nn::Module {
 public:
  StateAdd() : Module("StateAdd") {}
  Tensors forward(const Tensors& in) override;
  std::optional<nn::Config> config() const override { return nn::Config{}; }
};

}  // namespace fg::graph
