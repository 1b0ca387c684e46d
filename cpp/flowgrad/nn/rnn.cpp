#include "flowgrad/nn/rnn.h"

#include <cmath>
#include <tuple>

#include "flowgrad/nn/layer_util.h"

namespace fg::nn {

using detail::input;
using detail::optional_input;
using detail::param;
using detail::py_bool;
using detail::str;
using detail::uniform_tensor;

Recurrent::Recurrent(CellKind k, int64_t in, int64_t hidden, int64_t layers, bool b, bool first, double p, bool bidi)
    : Module(k == CellKind::LSTM ? "LSTM" : "GRU"), kind(k), input_size(in), hidden_size(hidden),
      num_layers(layers), bias(b), batch_first(first), dropout(p), bidirectional(bidi) {
  FG_CHECK(in > 0 && hidden > 0 && layers > 0, Value, type_name_, ": input_size, hidden_size and num_layers must be ",
           "> 0, got ", in, ", ", hidden, ", ", layers);
  FG_CHECK(p >= 0 && p <= 1, Value, type_name_, ": dropout must be in [0, 1], got ", p);
  int64_t gates = (k == CellKind::LSTM ? 4 : 3) * hidden, directions = bidi ? 2 : 1;
  double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (int64_t layer = 0; layer < layers; ++layer)
    for (int64_t d = 0; d < directions; ++d) {
      std::string suffix = "_l" + std::to_string(layer) + (d ? "_reverse" : "");
      register_parameter("weight_ih" + suffix, uniform_tensor({gates, layer ? hidden * directions : in}, bound));
      register_parameter("weight_hh" + suffix, uniform_tensor({gates, hidden}, bound));
      if (!b) continue;
      register_parameter("bias_ih" + suffix, uniform_tensor({gates}, bound));
      register_parameter("bias_hh" + suffix, uniform_tensor({gates}, bound));
    }
}

Tensor Recurrent::run_direction(const Tensor& x, const std::string& suffix, bool reverse, Tensor& h, Tensor& c) const {
  Tensor gi = linear(x, param(*this, "weight_ih" + suffix), param(*this, "bias_ih" + suffix));  // all steps at once
  Tensor w_hh = param(*this, "weight_hh" + suffix), b_hh = param(*this, "bias_hh" + suffix);
  int64_t last = reverse ? 0 : x.shape()[0] - 1;
  if (kind == CellKind::GRU) {
    Tensor y = gru_sequence(gi, h, w_hh, b_hh, reverse);
    h = select(y, 0, last);
    return y;
  }
  Tensors states = lstm_sequence(gi, h, c, w_hh, b_hh, reverse);
  h = select(states[0], 0, last);
  c = select(states[1], 0, last);
  return states[0];
}

Tensors Recurrent::forward(const Tensors& in) {
  Tensor x = input(in, 0, type_name_);
  int64_t directions = bidirectional ? 2 : 1, states = num_layers * directions;
  FG_CHECK((x.ndim() == 2 || x.ndim() == 3) && x.shape().back() == input_size, Shape, type_name_,
           ": expected input (L, N, ", input_size, "), (N, L, ", input_size, ") with batch_first, or unbatched (L, ",
           input_size, "), got ", to_string(x.shape()));
  bool batched = x.ndim() == 3;
  // (L, N, in). Batch-first input and output are copied once, here: the input projection and its
  // weight gradient (or the next layer, the head and its weight gradient) read whole rows, and a
  // view would be copied by each of them.
  x = batched ? (batch_first ? contiguous(transpose(x, 0, 1)) : x) : unsqueeze(x, 1);
  FG_CHECK(x.shape()[0] > 0, Shape, type_name_, ": expected a sequence of length > 0, got input ",
           to_string(in[0].shape()));
  int64_t batch = x.shape()[1];
  Dims state_shape = batched ? Dims{states, batch, hidden_size} : Dims{states, hidden_size};
  auto initial = [&](size_t i, const char* name) {
    Tensor s = optional_input(in, i);
    if (!s.defined()) return zeros({states, batch, hidden_size}, x.dtype(), x.device());
    FG_CHECK(s.shape() == state_shape, Shape, type_name_, ": expected ", name, " of shape ", to_string(state_shape),
             ", got ", to_string(s.shape()));
    return batched ? s : unsqueeze(s, 1);
  };
  Tensor h0 = initial(1, "h0"), c0 = kind == CellKind::LSTM ? initial(2, "c0") : Tensor();
  Tensors h_n, c_n;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    Tensors outputs;
    for (int64_t d = 0; d < directions; ++d) {
      int64_t k = layer * directions + d;
      Tensor h = select(h0, 0, k), c = c0.defined() ? select(c0, 0, k) : Tensor();
      std::string suffix = "_l" + std::to_string(layer) + (d ? "_reverse" : "");
      outputs.push_back(run_direction(x, suffix, d == 1, h, c));
      h_n.push_back(h);
      c_n.push_back(c);
    }
    x = directions == 2 ? cat(outputs, 2) : outputs[0];
    if (dropout > 0 && training_ && layer + 1 < num_layers) x = fg::dropout(x, dropout, true);
  }
  x = batched ? (batch_first ? contiguous(transpose(x, 0, 1)) : x) : squeeze(x, 1);
  auto final_state = [&](const Tensors& parts) {
    Tensor s = stack(parts, 0);
    return batched ? s : squeeze(s, 1);
  };
  if (kind == CellKind::GRU) return {x, final_state(h_n)};
  return {x, final_state(h_n), final_state(c_n)};
}

std::optional<Config> Recurrent::config() const {
  return Config{{"input_size", input_size}, {"hidden_size", hidden_size}, {"num_layers", num_layers},
                {"bias", bias}, {"batch_first", batch_first}, {"dropout", dropout}, {"bidirectional", bidirectional}};
}

std::string Recurrent::extra_repr() const {
  std::string out = str(input_size, ", ", hidden_size);
  if (num_layers != 1) out += str(", num_layers=", num_layers);
  if (!bias) out += ", bias=False";
  if (batch_first) out += ", batch_first=True";
  if (dropout != 0) out += str(", dropout=", dropout);
  if (bidirectional) out += ", bidirectional=True";
  return out;
}

}  // namespace fg::nn
