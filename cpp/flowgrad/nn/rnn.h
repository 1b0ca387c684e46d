// Multi-step, multi-layer LSTM and GRU with PyTorch's layout, gate order (i, f, g, o and r, z, n)
// and parameter names (weight_ih_l0, bias_hh_l1_reverse, ...), so state_dicts exchange with
// PyTorch. Each layer direction is one lstm_sequence / gru_sequence op over every step after one
// input projection for all steps (ops/rnn.cpp), on every device, with the backward through time
// as one op.
#pragma once
#include <utility>

#include "flowgrad/nn/module.h"

namespace fg::nn {

enum class CellKind : uint8_t { LSTM, GRU };

class Recurrent : public Module {
 public:
  Recurrent(CellKind kind, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
            bool batch_first, double dropout, bool bidirectional);
  // (x, h0 or None[, c0 or None]) -> (output, h_n[, c_n]). x is (L, N, input_size), (N, L,
  // input_size) with batch_first, or unbatched (L, input_size); states are
  // (num_layers * directions, N, hidden_size), or without N for unbatched input.
  Tensors forward(const Tensors& in) override;
  std::string extra_repr() const override;
  std::optional<Config> config() const override;
  CellKind kind;
  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first;
  double dropout;
  bool bidirectional;

 private:
  // Runs one layer in one direction over x (L, N, in); returns the outputs (L, N, H) and the
  // final state(s).
  Tensor run_direction(const Tensor& x, const std::string& suffix, bool reverse, Tensor& h, Tensor& c) const;
};

class LSTM : public Recurrent {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
       bool bidirectional)
      : Recurrent(CellKind::LSTM, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}
};

class GRU : public Recurrent {
 public:
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
      bool bidirectional)
      : Recurrent(CellKind::GRU, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}
};

}  // namespace fg::nn
