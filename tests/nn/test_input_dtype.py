"""A layer fed an input whose dtype differs from its parameters raises fg.DTypeError naming the
layer, both dtypes and the fix (PyTorch raises too), instead of silently computing in float64."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn

LAYERS = [
    ("Linear", lambda: nn.Linear(3, 2), (4, 3)),
    ("Conv2d", lambda: nn.Conv2d(3, 2, 3), (1, 3, 5, 5)),
    ("LayerNorm", lambda: nn.LayerNorm(3), (4, 3)),
    ("RMSNorm", lambda: nn.RMSNorm(3), (4, 3)),
    ("MultiheadAttention", lambda: nn.MultiheadAttention(4, 2), (1, 5, 4)),
    ("GRUCell", lambda: nn.GRUCell(3, 2), (4, 3)),
    ("LSTMCell", lambda: nn.LSTMCell(3, 2), (4, 3)),
]


@pytest.mark.parametrize("name,make_layer,shape", LAYERS)
def test_float64_input_to_float32_layer_raises_with_the_fix(name, make_layer, shape):
    layer = make_layer()
    x = fg.tensor(np.random.default_rng(0).normal(size=shape))  # NumPy's float64, e.g. from scikit-learn
    assert x.dtype == fg.float64
    with pytest.raises(fg.DTypeError, match=rf"{name}: the input is float64 but the layer's parameters are float32; "
                                            r"convert the input with x\.float\(\) or x\.to\(fg\.float32\)"):
        layer(x)
    out = layer(x.float())  # the fix named in the message works
    assert (out[0] if isinstance(out, tuple) else out).dtype == fg.float32


def test_integer_input_and_float64_layers():
    lin = nn.Linear(3, 2)
    with pytest.raises(fg.DTypeError, match="Linear: the input is int64 but the layer's parameters are float32"):
        lin(fg.tensor([[1, 2, 3]]))
    assert lin(fg.tensor([[1, 2, 3]]) / 255).dtype == fg.float32  # true division gives float32
    lin.weight = nn.Parameter(lin.weight.double())
    lin.bias = nn.Parameter(lin.bias.double())
    with pytest.raises(fg.DTypeError, match=r"convert the input with x\.to\(fg\.float64\)"):
        lin(fg.ones(1, 3))
    assert lin(fg.ones(1, 3, dtype=fg.float64)).dtype == fg.float64


def test_layers_inside_sequential_name_the_layer():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    with pytest.raises(fg.DTypeError, match="Linear: the input is float64"):
        model(fg.tensor(np.ones((2, 3))))
