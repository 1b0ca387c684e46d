"""The ops only the plan's epilogue pass makes: linear_<act> (linear_relu, linear_gelu,
linear_gelu_tanh, linear_silu, linear_tanh, linear_sigmoid) and <act>_backward_colsum
(relu_backward_colsum, gelu_backward_colsum, gelu_tanh_backward_colsum, silu_backward_colsum,
tanh_backward_colsum, sigmoid_backward_colsum) and mul_colsum (the backward of a linear_gelu,
linear_gelu_tanh or linear_silu that kept its derivative), checked against NumPy through compiled
steps."""
import math

import numpy as np
import pytest

import flowgrad as fg

nn = fg.nn
erf = np.vectorize(math.erf)


def np_sigmoid(y):
    return 1 / (1 + np.exp(-y))


def gelu_tanh_parts(y):
    c = math.sqrt(2 / math.pi)
    t = np.tanh(c * (y + 0.044715 * y ** 3))
    return 0.5 * y * (1 + t), 0.5 * (1 + t) + 0.5 * y * (1 - t ** 2) * c * (1 + 3 * 0.044715 * y ** 2)


ACTS = {  # module, f, f'
    "relu": (nn.ReLU, lambda y: np.maximum(y, 0), lambda y: (y > 0).astype(y.dtype)),
    "gelu": (nn.GELU, lambda y: 0.5 * y * (1 + erf(y / math.sqrt(2))),
             lambda y: 0.5 * (1 + erf(y / math.sqrt(2))) + y * np.exp(-y * y / 2) / math.sqrt(2 * math.pi)),
    "gelu_tanh": (lambda: nn.GELU(approximate="tanh"), lambda y: gelu_tanh_parts(y)[0], lambda y: gelu_tanh_parts(y)[1]),
    "silu": (nn.SiLU, lambda y: y * np_sigmoid(y), lambda y: np_sigmoid(y) * (1 + y * (1 - np_sigmoid(y)))),
    "tanh": (nn.Tanh, np.tanh, lambda y: 1 - np.tanh(y) ** 2),
    "sigmoid": (nn.Sigmoid, np_sigmoid, lambda y: np_sigmoid(y) * (1 - np_sigmoid(y))),
}


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 45, 65), (200, 9), (1, 1)])
def test_fused_linear_activation_and_bias_gradient_match_numpy(act, dtype, shape, device):
    rng = np.random.default_rng(7)
    n = 33 if shape[-1] > 1 else 1
    fg.manual_seed(1)
    layer = nn.Linear(shape[-1], n)
    if dtype == "float64":
        layer.weight, layer.bias = nn.Parameter(layer.weight.double()), nn.Parameter(layer.bias.double())
    model = nn.Sequential(layer, ACTS[act][0]()).to(device)
    w, b = layer.weight.cpu().numpy().astype(np.float64), layer.bias.cpu().numpy().astype(np.float64)
    x, g = rng.normal(size=shape) * 2, rng.normal(size=shape[:-1] + (n,))
    xs, gs = (fg.tensor(a.astype(dtype), device=device) for a in (x, g))
    step = fg.compile(model, lambda out, weights: (out * weights).sum(), None, example_inputs=(xs, gs))
    loss = step(xs, gs).item()
    rows = step.explain().rows
    assert f"linear_{act}" in [r["op"] for r in rows if r["phase"] == "forward"]
    colsum = "mul_colsum" if act in ("gelu", "gelu_tanh", "silu") else f"{act}_backward_colsum"
    assert (colsum in [r["op"] for r in rows]) == (device == "cpu")
    _, f, df = ACTS[act]
    y = x @ w.T + b
    dy = df(y) * g
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(loss, (f(y) * g).sum(), rtol=tol, atol=tol)
    np.testing.assert_allclose(layer.bias.grad.cpu().numpy(), dy.reshape(-1, n).sum(0), rtol=tol, atol=tol)
    np.testing.assert_allclose(layer.weight.grad.cpu().numpy(), dy.reshape(-1, n).T @ x.reshape(-1, shape[-1]),
                               rtol=tol, atol=tol)



class ProductAlsoRead(nn.Module):
    """act(linear(x)) + mean(|linear(x)|) (detached): the product has a reader besides the
    activation's backward, so linear_<act> keeps the product (not a derivative) and every
    activation's backward stays, feeding the bias gradient's column sum."""

    def __init__(self, act, k, n):
        super().__init__()
        self.layer, self.act = nn.Linear(k, n), ACTS[act][0]()

    def forward(self, x):
        h = self.layer(x)
        return self.act(h) + h.detach().abs().mean()


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_each_activation_backward_and_its_column_sum_match_numpy(act, dtype, device):
    rng = np.random.default_rng(8)
    fg.manual_seed(2)
    model = ProductAlsoRead(act, 19, 47).to(device=device, dtype=getattr(fg, dtype))
    w, b = (p.cpu().numpy().astype(np.float64) for p in (model.layer.weight, model.layer.bias))
    x, g = rng.normal(size=(61, 19)), rng.normal(size=(61, 47))
    xs, gs = (fg.tensor(a.astype(dtype), device=device) for a in (x, g))
    step = fg.compile(model, lambda out, weights: (out * weights).sum(), None, example_inputs=(xs, gs))
    loss = step(xs, gs).item()
    rows = step.explain().rows
    assert f"linear_{act}" in [r["op"] for r in rows]
    assert (f"{act}_backward_colsum" in [r["op"] for r in rows]) == (device == "cpu")
    _, f, df = ACTS[act]
    y = x @ w.T + b
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(loss, ((f(y) + np.abs(y).mean()) * g).sum(), rtol=tol, atol=tol)
    np.testing.assert_allclose(model.layer.bias.grad.cpu().numpy(), (df(y) * g).sum(0), rtol=tol, atol=tol)
    np.testing.assert_allclose(model.layer.weight.grad.cpu().numpy(), (df(y) * g).T @ x, rtol=tol, atol=tol)
