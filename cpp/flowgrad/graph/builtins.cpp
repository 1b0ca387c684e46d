#include "flowgrad/graph/builtins.h"

#include "flowgrad/ops/ops.h"

namespace fg::graph {
namespace {

Tensors present(const Tensors& in, const std::string& name, size_t at_least) {
  Tensors out;
  for (const Tensor& t : in)
    if (t.defined()) out.push_back(t);
  FG_CHECK(out.size() >= at_least, Value, name, ": expected at least ", at_least, " tensor input(s), got ", out.size());
  return out;
}

Tensor sum_of(const Tensors& ts) {
  Tensor out = ts[0];
  for (size_t i = 1; i < ts.size(); ++i) out = out + ts[i];
  return out;
}

std::string join_dims(const std::vector<int64_t>& v) {
  std::string out;
  for (int64_t d : v) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return out;
}

void add_projection(nn::Module& owner, const char* name, int64_t in_dim, int64_t n) {
  FG_CHECK(in_dim >= 1 && n >= 1, Value, name, ": in_dim and n must be >= 1, got ", in_dim, " and ", n);
  owner.register_module("proj", std::make_shared<nn::Linear>(in_dim, n, true));
}

// The "proj" child, looked up at each use so that a copied module uses its own.
nn::Linear& proj(const nn::Module& owner) {
  auto* linear = dynamic_cast<nn::Linear*>(owner.child("proj").get());
  FG_CHECK(linear != nullptr, Value, owner.type_name(), ": its 'proj' submodule must be an fg.nn.Linear");
  return *linear;
}

Tensor project(const nn::Module& owner, const Tensors& in) {
  return proj(owner)({present(in, owner.type_name(), 1)[0]})[0];
}

nn::Config projection_config(const nn::Module& owner) {
  return nn::Config{{"in_dim", proj(owner).in_features}, {"n", proj(owner).out_features}};
}

}  // namespace

Tensors Add::forward(const Tensors& in) { return {sum_of(present(in, "Add", 1))}; }

Tensors Mean::forward(const Tensors& in) {
  Tensors ts = present(in, "Mean", 1);
  return {sum_of(ts) / static_cast<double>(ts.size())};
}

Tensors Cat::forward(const Tensors& in) { return {cat(present(in, "Cat", 1), dim)}; }
std::string Cat::extra_repr() const { return "dim=" + std::to_string(dim); }

Tensors Reshape::forward(const Tensors& in) { return {reshape(present(in, "Reshape", 1)[0], shape)}; }
std::string Reshape::extra_repr() const { return join_dims(shape); }

Router::Router(const char* name, int64_t in_dim, int64_t n, bool softmax)
    : Module(name), softmax_(softmax) {
  add_projection(*this, name, in_dim, n);
}
Tensors Router::forward(const Tensors& in) {
  Tensor scores = project(*this, in);
  return {softmax_ ? softmax(scores, -1) : sigmoid(scores)};
}
std::optional<nn::Config> Router::config() const { return projection_config(*this); }
std::string Router::extra_repr() const { return nn::format_config(projection_config(*this)); }

ArgmaxSelector::ArgmaxSelector(int64_t in_dim, int64_t n)
    : Module("ArgmaxSelector") {
  add_projection(*this, "ArgmaxSelector", in_dim, n);
}
Tensors ArgmaxSelector::forward(const Tensors& in) {
  Tensor scores = project(*this, in);
  Tensor per_branch = mean(reshape(scores, {-1, proj(*this).out_features}), Dims{0}, false);
  return {argmax(per_branch, std::nullopt, false)};
}
std::optional<nn::Config> ArgmaxSelector::config() const { return projection_config(*this); }
std::string ArgmaxSelector::extra_repr() const { return nn::format_config(projection_config(*this)); }

FixedSelector::FixedSelector(int64_t index) : Module("FixedSelector"), index(index) {
  FG_CHECK(index >= 0, Value, "FixedSelector: the branch index must be >= 0, got ", index);
}
Tensors FixedSelector::forward(const Tensors& in) {
  return {scalar_tensor(static_cast<double>(index), DType::Int64, present(in, "FixedSelector", 1)[0].device())};
}
std::optional<nn::Config> FixedSelector::config() const { return nn::Config{{"index", index}}; }
std::string FixedSelector::extra_repr() const { return std::to_string(index); }

LearnedHalt::LearnedHalt(int64_t in_dim) : Module("LearnedHalt") { add_projection(*this, "LearnedHalt", in_dim, 1); }
Tensors LearnedHalt::forward(const Tensors& in) { return {mean(project(*this, in), Dims{}, false)}; }
std::optional<nn::Config> LearnedHalt::config() const { return nn::Config{{"in_dim", proj(*this).in_features}}; }
std::string LearnedHalt::extra_repr() const { return "in_dim=" + std::to_string(proj(*this).in_features); }

Tensors ThresholdHalt::forward(const Tensors& in) {
  return {mean(present(in, "ThresholdHalt", 1)[0], Dims{}, false) - threshold};
}
std::optional<nn::Config> ThresholdHalt::config() const { return nn::Config{{"threshold", threshold}}; }
std::string ThresholdHalt::extra_repr() const { return "threshold=" + std::to_string(threshold); }

Tensors StateAdd::forward(const Tensors& in) {
  Tensors ts = present(in, "StateAdd", 1);
  return {ts.size() == 1 ? ts[0] : ts[0] + ts[1]};
}

}  // namespace fg::graph
