// fg.nn layers with PyTorch signatures: BatchNorm1d/2d, GroupNorm, LSTM, GRU.
#include "common.h"
#include "flowgrad/nn/norm.h"
#include "flowgrad/nn/rnn.h"

namespace fg::py_bind {
namespace {

template <class Norm>
void bind_batch_norm(py::module_& m, const char* name, const char* doc) {
  py::class_<Norm, nn::BatchNorm, py::smart_holder>(m, name, doc)
      .def(py::init<int64_t, double, std::optional<double>, bool, bool>(), py::arg("num_features"),
           py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true,
           py::arg("track_running_stats") = true);
}

// Both recurrent layers take PyTorch's constructor arguments.
template <class Layer, class Forward>
void bind_recurrent(py::module_& m, const char* name, const char* doc, Forward forward, const char* forward_doc) {
  py::class_<Layer, nn::Recurrent, py::smart_holder>(m, name, doc)
      .def(py::init<int64_t, int64_t, int64_t, bool, bool, double, bool>(), py::arg("input_size"),
           py::arg("hidden_size"), py::arg("num_layers") = 1, py::arg("bias") = true, py::arg("batch_first") = false,
           py::arg("dropout") = 0.0, py::arg("bidirectional") = false)
      .def("forward", forward, py::arg("input"), py::arg("hx") = py::none(), forward_doc);
}

Tensors call_released(nn::Module& layer, const Tensors& in) {
  py::gil_scoped_release release;
  return layer.forward(in);
}

}  // namespace

void bind_layers(py::module_& m) {
  py::class_<nn::BatchNorm, nn::Module, py::smart_holder>(m, "_BatchNorm")
      .def_readonly("num_features", &nn::BatchNorm::num_features, "Channels C normalised.")
      .def_readonly("eps", &nn::BatchNorm::eps, "Added to the variance before its square root.")
      .def_readwrite("momentum", &nn::BatchNorm::momentum,
                     "Weight of each batch in the running statistics (None: cumulative average).")
      .def_readonly("affine", &nn::BatchNorm::affine, "Whether it has a learned per-channel weight and bias.")
      .def_readonly("track_running_stats", &nn::BatchNorm::track_running_stats,
                    "Whether it keeps running_mean/running_var (else eval mode uses batch statistics too).");
  bind_batch_norm<nn::BatchNorm1d>(m, "BatchNorm1d",
      "Batch normalisation of (N, C) or (N, C, L) input per channel; running_mean/running_var buffers "
      "(momentum=None: cumulative average), batch statistics in training, running ones in eval.");
  bind_batch_norm<nn::BatchNorm2d>(m, "BatchNorm2d",
      "Batch normalisation of (N, C, H, W) input per channel; running_mean/running_var buffers "
      "(momentum=None: cumulative average), batch statistics in training, running ones in eval.");
  py::class_<nn::GroupNorm, nn::Module, py::smart_holder>(m, "GroupNorm",
      "Group normalisation of (N, C, *) input: channels in num_groups groups, per-channel weight and bias.")
      .def(py::init<int64_t, int64_t, double, bool>(), py::arg("num_groups"), py::arg("num_channels"),
           py::arg("eps") = 1e-5, py::arg("affine") = true)
      .def_readonly("num_groups", &nn::GroupNorm::num_groups, "Groups the channels are split into.")
      .def_readonly("num_channels", &nn::GroupNorm::num_channels, "Channels C of the input.")
      .def_readonly("eps", &nn::GroupNorm::eps, "Added to the variance before its square root.");
  py::class_<nn::Recurrent, nn::Module, py::smart_holder>(m, "_Recurrent")
      .def_readonly("input_size", &nn::Recurrent::input_size, "Features of each input step.")
      .def_readonly("hidden_size", &nn::Recurrent::hidden_size, "Features of the hidden state.")
      .def_readonly("num_layers", &nn::Recurrent::num_layers, "Stacked layers.")
      .def_readonly("batch_first", &nn::Recurrent::batch_first, "Input and output are (N, L, *) instead of (L, N, *).")
      .def_readonly("bidirectional", &nn::Recurrent::bidirectional, "Whether each layer also runs backwards in time.")
      .def_readwrite("dropout", &nn::Recurrent::dropout, "Dropout probability between layers (training only).");
  bind_recurrent<nn::LSTM>(m, "LSTM",
      "Multi-layer LSTM (PyTorch layout, gate order i, f, g, o and parameter names): "
      "lstm(x, (h0, c0)=None) -> (output, (h_n, c_n)).",
      [](nn::LSTM& self, const Tensor& x, const py::object& hx) {
        Tensors in{x, Tensor(), Tensor()};
        if (!hx.is_none()) {
          Tensors states = tensors_of(hx, "LSTM");
          FG_CHECK(states.size() == 2, Value, "LSTM: hx must be a tuple (h0, c0), got ", states.size(), " tensors");
          in[1] = states[0], in[2] = states[1];
        }
        Tensors out = call_released(self, in);
        return py::make_tuple(out[0], py::make_tuple(out[1], out[2]));
      }, "(output, (h_n, c_n)) for input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)).");
  bind_recurrent<nn::GRU>(m, "GRU",
      "Multi-layer GRU (PyTorch layout, gate order r, z, n and parameter names): gru(x, h0=None) -> (output, h_n).",
      [](nn::GRU& self, const Tensor& x, std::optional<Tensor> h0) {
        Tensors out = call_released(self, {x, h0.value_or(Tensor())});
        return py::make_tuple(out[0], out[1]);
      }, "(output, h_n) for input (L, N, H_in) ((N, L, H_in) with batch_first, or unbatched (L, H_in)).");
}

}  // namespace fg::py_bind
