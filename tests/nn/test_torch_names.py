"""PyTorch's activation, 1-d pooling and container names that scripts use (issue 38): Hardtanh,
ReLU6, Hardsigmoid, Hardswish, SELU, CELU, PReLU, LogSigmoid, GLU, Softsign, Tanhshrink,
Unflatten, MaxPool1d, AvgPool1d, AdaptiveAvgPool1d and ParameterDict, and their functional forms:
NumPy closed forms (extremes, NaN, size-0 and size-1 dims), float64 finite differences, the
documented errors, a compiled step equal to eager and state_dict round trips."""
import copy
import math
import pickle

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn
from conftest import gradcheck

X = np.array([-np.inf, -1e4, -30.0, -3.5, -2.0, -0.5, 0.0, 0.25, 0.5, 2.5, 3.5, 7.0, 30.0, 1e4, np.inf, np.nan])
SMOOTH = np.array([-4.1, -2.2, -0.7, -0.3, 0.4, 1.3, 2.9, 5.1, 6.6])  # off every activation's kinks
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def np_softplus(x):
    with np.errstate(invalid="ignore"):
        return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def np_elu(x, alpha):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


ACTIVATIONS = {  # name: (module, functional, NumPy closed form)
    "Hardtanh": (lambda: nn.Hardtanh(), F.hardtanh, lambda x: np.clip(x, -1, 1)),
    "Hardtanh(-2, 3)": (lambda: nn.Hardtanh(-2.0, 3.0), lambda t: F.hardtanh(t, -2.0, 3.0), lambda x: np.clip(x, -2, 3)),
    "ReLU6": (lambda: nn.ReLU6(), F.relu6, lambda x: np.clip(x, 0, 6)),
    "Hardsigmoid": (lambda: nn.Hardsigmoid(), F.hardsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6),
    "Hardswish": (lambda: nn.Hardswish(), F.hardswish,  # PyTorch's kernel formula: NaN at -inf (-inf * 0)
                  lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "SELU": (lambda: nn.SELU(), F.selu, lambda x: SELU_SCALE * np_elu(x, SELU_ALPHA)),
    "CELU": (lambda: nn.CELU(), F.celu, lambda x: np_elu(x, 1.0)),
    "CELU(0.5)": (lambda: nn.CELU(0.5), lambda t: F.celu(t, 0.5),
                  lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0) / 0.5))),
    "PReLU": (lambda: nn.PReLU(), lambda t: F.prelu(t, fg.tensor([0.25], dtype=t.dtype)),
              lambda x: np.where(x > 0, x, 0.25 * x)),
    "LogSigmoid": (lambda: nn.LogSigmoid(), F.logsigmoid, lambda x: -np_softplus(-x)),
    "Softsign": (lambda: nn.Softsign(), F.softsign, lambda x: x / (1 + np.abs(x))),
    "Tanhshrink": (lambda: nn.Tanhshrink(), F.tanhshrink, lambda x: x - np.tanh(x)),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_match_numpy_at_extremes_and_propagate_nan(name, device):
    make, functional, reference = ACTIVATIONS[name]
    module = make().to(device)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = reference(X)
    assert np.isnan(expected[-1])
    for got in (module(fg.tensor(X, device=device)), functional(fg.tensor(X, device=device))):
        assert got.dtype == fg.float64 and got.shape == X.shape
        np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=1e-12, atol=1e-12)
    odd = np.random.default_rng(0).standard_normal((3, 5, 1, 7)).astype(np.float32) * 4
    got = module(fg.tensor(odd, device=device))
    assert got.dtype == fg.float32 and got.shape == odd.shape
    np.testing.assert_allclose(got.cpu().numpy(), reference(odd.astype(np.float64)), rtol=1e-5, atol=1e-6)
    assert module(fg.zeros(2, 0, 3, device=device)).shape == (2, 0, 3)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_have_finite_difference_gradients(name):
    make, functional, _ = ACTIVATIONS[name]
    module = make()
    if name != "PReLU":  # the module's float32 weight: its float64 check is test_prelu_*
        gradcheck(lambda t: module(t), SMOOTH)
    gradcheck(lambda t: functional(t), SMOOTH.reshape(3, 3))
    x = fg.tensor(X[1:-2], requires_grad=True)  # large finite inputs: no NaN or inf gradient
    module.to(fg.float64)(x).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("function, points, expected", [  # PyTorch's backward formulas at and around the kinks
    (F.hardtanh, [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], [0, 0, 1, 1, 0, 0]),
    (lambda t: F.hardtanh(t, -2.0, 3.0), [-2.0, -1.9, 2.9, 3.0], [0, 1, 1, 0]),
    (F.relu6, [-1.0, 0.0, 0.5, 6.0, 7.0], [0, 0, 1, 0, 0]),
    (F.hardsigmoid, [-4.0, -3.0, 0.0, 3.0, 4.0], [0, 0, 1 / 6, 0, 0]),
    (F.hardswish, [-4.0, -3.0, 0.0, 3.0, 4.0], [0, -0.5, 0.5, 1.5, 1]),
])
def test_gradients_at_the_kinks_are_pytorchs(function, points, expected):
    x = fg.tensor(points, dtype=fg.float64, requires_grad=True)
    function(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-15)


def test_reprs_and_inplace_flags_as_pytorch():
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    assert repr(nn.Hardtanh(0.0, 2.0, inplace=True)) == "Hardtanh(min_val=0.0, max_val=2.0, inplace=True)"
    assert repr(nn.ReLU6()) == "ReLU6()" and repr(nn.ReLU6(True)) == "ReLU6(inplace=True)"
    assert repr(nn.SELU(inplace=True)) == "SELU(inplace=True)" and repr(nn.Hardswish()) == "Hardswish()"
    assert repr(nn.CELU(0.5, True)) == "CELU(alpha=0.5, inplace=True)"
    assert repr(nn.PReLU(3)) == "PReLU(num_parameters=3)  # 3 parameters" and repr(nn.GLU()) == "GLU(dim=-1)"
    assert repr(nn.Unflatten(1, (2, 3))) == "Unflatten(dim=1, unflattened_size=(2, 3))"
    assert repr(nn.MaxPool1d(3)) == "MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.AvgPool1d(2, 1)) == "AvgPool1d(kernel_size=2, stride=1, padding=0)"
    assert repr(nn.AdaptiveAvgPool1d(4)) == "AdaptiveAvgPool1d(output_size=4)"
    x = fg.tensor([-7.0, -1.0, 2.0, 8.0])
    for inplace, out_of_place in ((nn.ReLU6(inplace=True), nn.ReLU6()), (nn.Hardtanh(inplace=True), nn.Hardtanh()),
                                  (nn.Hardswish(True), nn.Hardswish()), (nn.SELU(True), nn.SELU()),
                                  (nn.CELU(inplace=True), nn.CELU()), (nn.Hardsigmoid(True), nn.Hardsigmoid())):
        np.testing.assert_array_equal(inplace(x).numpy(), out_of_place(x).numpy())
    np.testing.assert_array_equal(F.relu6(x, inplace=True).numpy(), [0, 0, 2, 6])
    np.testing.assert_array_equal(x.numpy(), [-7, -1, 2, 8])  # computed out of place


def test_hardtanh_takes_pytorchs_deprecated_min_value_max_value():
    x = fg.tensor([-3.0, -0.75, 0.1, 0.9, 2.0])
    with pytest.warns(FutureWarning, match=r"`min_value` is deprecated and renamed to `min_val`"):
        lower = nn.Hardtanh(min_value=-0.5)
    np.testing.assert_array_equal(lower(x).numpy(), np.clip(x.numpy(), -0.5, 1.0))
    with pytest.warns(FutureWarning, match=r"`(min|max)_value` is deprecated and renamed to `(min|max)_val`") as caught:
        both = nn.Hardtanh(-2.0, 3.0, min_value=-0.25, max_value=0.5)  # the old names win, as in PyTorch
    assert len(caught) == 2 and "max_value" in str(caught[1].message)
    assert (both.min_val, both.max_val) == (-0.25, 0.5)
    np.testing.assert_array_equal(both(x).numpy(), np.clip(x.numpy(), -0.25, 0.5))
    with pytest.warns(FutureWarning), pytest.raises(fg.InvalidArgumentError,
                                                    match=r"Hardtanh: min_val must be <= max_val, got min_val=2.0"):
        nn.Hardtanh(max_value=1.0, min_value=2.0)


def test_activation_argument_errors():
    with pytest.raises(fg.InvalidArgumentError, match=r"Hardtanh: min_val must be <= max_val, got min_val=2.0, "
                                                      r"max_val=1.0"):
        nn.Hardtanh(2.0, 1.0)
    with pytest.raises(fg.InvalidArgumentError, match=r"hardtanh: min_val must be <= max_val, got min_val=1, max_val=0"):
        F.hardtanh(fg.ones(2), 1, 0)
    with pytest.raises(fg.InvalidArgumentError, match=r"CELU: alpha must not be 0"):
        nn.CELU(0.0)
    with pytest.raises(fg.InvalidArgumentError, match=r"celu: alpha must not be 0"):
        F.celu(fg.ones(2), 0)
    with pytest.raises(fg.InvalidArgumentError, match=r"PReLU: num_parameters must be a positive int, got 0"):
        nn.PReLU(0)


@pytest.mark.parametrize("shape", [(2, 3, 5), (4, 3), (1, 3, 2, 2), (0, 3, 4)])
def test_prelu_per_channel_slopes_broadcast_over_dim_1(shape, rng):
    slopes = np.array([0.1, -0.5, 2.0])
    x = rng.standard_normal(shape)
    w = slopes.reshape((1, 3) + (1,) * (len(shape) - 2))
    got = F.prelu(fg.tensor(x), fg.tensor(slopes))
    np.testing.assert_allclose(got.numpy(), np.where(x > 0, x, w * x), rtol=1e-12)
    m = nn.PReLU(3, init=0.1)
    assert m.weight.shape == (3,) and m.weight.requires_grad
    np.testing.assert_allclose(m(fg.tensor(x, dtype=fg.float32)).numpy(), np.where(x > 0, x, 0.1 * x), rtol=1e-6)


def test_prelu_gradients_reach_input_and_weight(rng):
    x = rng.standard_normal((2, 3, 4))
    x[np.abs(x) < 0.05] = 0.3  # off the kink at 0
    gradcheck(lambda t, w: F.prelu(t, w), x, np.array([0.1, -0.5, 2.0]))
    gradcheck(lambda t, w: F.prelu(t, w), x, np.array([0.3]))
    m = nn.PReLU(3)
    t = fg.tensor(x, dtype=fg.float32)
    m(t).sum().backward()
    expected = np.where(x > 0, 0, x).sum((0, 2))
    np.testing.assert_allclose(m.weight.grad.numpy(), expected, rtol=1e-5)


def test_prelu_errors_name_the_expected_shape():
    with pytest.raises(fg.ShapeError, match=r"prelu: weight has 3 parameters but the input \(2, 4, 5\) has 4 channels "
                                            r"\(dim 1\); expected 1 parameter or one per channel"):
        nn.PReLU(3)(fg.ones(2, 4, 5))
    with pytest.raises(fg.ShapeError, match=r"prelu: weight has 3 parameters but the input \(3,\) has 1 channels"):
        F.prelu(fg.ones(3), fg.ones(3))
    with pytest.raises(fg.ShapeError, match=r"prelu: weight must be a scalar or 1-D, got shape \(1, 1\)"):
        F.prelu(fg.ones(3), fg.ones(1, 1))
    with pytest.raises(TypeError, match=r"prelu: expected fg.Tensors for input and weight, got Tensor and float"):
        F.prelu(fg.ones(3), 0.25)


def test_prelu_state_dict_round_trip():
    a, b = nn.PReLU(4), nn.PReLU(4, init=0.0)
    a.weight.data = fg.tensor([0.1, 0.2, 0.3, 0.4])
    assert list(a.state_dict()) == ["weight"]
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(b.weight.detach().numpy(), np.float32([0.1, 0.2, 0.3, 0.4]))
    twin = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(twin.weight.detach().numpy(), a.weight.detach().numpy())


@pytest.mark.parametrize("shape, dim", [((2, 6), -1), ((4, 3, 5), 0), ((1, 2, 7), 1), ((0, 4), 1)])
def test_glu_halves_along_dim(shape, dim, rng):
    x = rng.standard_normal(shape) * 5
    a, b = np.split(x, 2, axis=dim)
    expected = a / (1 + np.exp(-b))
    np.testing.assert_allclose(nn.GLU(dim)(fg.tensor(x)).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(F.glu(fg.tensor(x), dim).numpy(), expected, rtol=1e-12)
    if x.size:
        gradcheck(lambda t: F.glu(t, dim), x)


def test_glu_errors():
    with pytest.raises(fg.ShapeError, match=r"glu: dim 1 of input \(2, 5\) must exist and have an even size"):
        nn.GLU(1)(fg.ones(2, 5))
    with pytest.raises(fg.ShapeError, match=r"glu: dim 2 of input \(2, 4\) must exist"):
        F.glu(fg.ones(2, 4), 2)
    with pytest.raises(fg.ShapeError, match=r"glu: expected a tensor with at least 1 dim, got a 0-d tensor"):
        F.glu(fg.tensor(1.0))


@pytest.mark.parametrize("shape, dim, sizes, out", [
    ((2, 12), 1, (3, 4), (2, 3, 4)), ((2, 12, 5), -2, [2, -1, 3], (2, 2, 2, 3, 5)), ((6,), 0, (6, 1), (6, 1)),
    ((0, 6), 1, (2, 3), (0, 2, 3)), ((3, 1), -1, (1, 1, 1), (3, 1, 1, 1)),
])
def test_unflatten_splits_a_dim(shape, dim, sizes, out, rng):
    x = rng.standard_normal(shape)
    m = nn.Unflatten(dim, sizes)
    y = m(fg.tensor(x))
    assert y.shape == out
    np.testing.assert_array_equal(y.numpy(), x.reshape(out))
    t = fg.tensor(x, requires_grad=True)
    (m(t) * fg.tensor(np.arange(y.numel(), dtype=np.float64).reshape(out))).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.arange(x.size).reshape(shape))


def test_unflatten_errors():
    with pytest.raises(fg.ShapeError, match=r"Unflatten: sizes \(4, 4\) do not multiply to dim 1's size 12 of input "
                                            r"\(2, 12\)"):
        nn.Unflatten(1, (4, 4))(fg.ones(2, 12))
    with pytest.raises(fg.ShapeError, match=r"Unflatten: sizes \(5, -1\) do not multiply to dim 1's size 12"):
        nn.Unflatten(1, (5, -1))(fg.ones(2, 12))
    with pytest.raises(fg.ShapeError, match=r"Unflatten: dim 2 is out of range for input \(2, 12\)"):
        nn.Unflatten(2, (3, 4))(fg.ones(2, 12))
    with pytest.raises(fg.ShapeError, match=r"Unflatten: dim 0 is out of range for input \(\)"):
        nn.Unflatten(0, (1, 1))(fg.tensor(1.0))
    with pytest.raises(fg.InvalidArgumentError, match=r"Unflatten: expected an int dim and a non-empty tuple of sizes "
                                                      r"\(at most one -1\), got dim=1, unflattened_size=4"):
        nn.Unflatten(1, 4)
    with pytest.raises(fg.InvalidArgumentError, match=r"Unflatten: expected .* got dim=1, unflattened_size=\(-1, -1\)"):
        nn.Unflatten(1, (-1, -1))


def np_pool1d(x, k, s, p, d, ceil, reduce, fill, count_include_pad=True):
    """PyTorch's pooling loops, written out: windows over the padded last dim."""
    length = x.shape[-1]
    room = length + 2 * p - d * (k - 1) - 1
    out = (math.ceil(room / s) if ceil else room // s) + 1
    if ceil and (out - 1) * s >= length + p:
        out -= 1
    padded = np.concatenate([np.full(x.shape[:-1] + (p,), fill), x, np.full(x.shape[:-1] + (p + k * d + s,), fill)], -1)
    cols = []
    for j in range(out):
        start = j * s
        window = padded[..., start:start + (k - 1) * d + 1:d]
        if reduce == "max":
            cols.append(window.max(-1))
        else:
            end = min(start + k, length + 2 * p)
            div = end - start if count_include_pad else min(end, length + p) - max(start, p)
            cols.append(window.sum(-1) / div)
    return np.stack(cols, -1)


POOLS = [  # kernel_size, stride, padding, dilation, ceil_mode
    (3, None, 0, 1, False), (2, 1, 1, 1, False), (3, 2, 1, 2, False), (4, 3, 2, 1, True), (2, 2, 0, 1, True),
    (1, 1, 0, 1, False), (5, 2, 2, 1, True),
]


@pytest.mark.parametrize("k, s, p, d, ceil", POOLS)
@pytest.mark.parametrize("shape", [(2, 3, 11), (3, 7), (1, 1, 5), (0, 2, 9)])
def test_max_pool1d_matches_the_loop(k, s, p, d, ceil, shape, device, rng):
    x = rng.standard_normal(shape)
    expected = np_pool1d(x, k, s or k, p, d, ceil, "max", -np.inf)
    got = F.max_pool1d(fg.tensor(x, device=device), k, s, p, d, ceil)
    np.testing.assert_array_equal(got.cpu().numpy(), expected)
    module = nn.MaxPool1d(k, s, p, d, ceil_mode=ceil)
    np.testing.assert_array_equal(module(fg.tensor(x, device=device)).cpu().numpy(), expected)
    values, index = nn.MaxPool1d(k, s, p, d, return_indices=True, ceil_mode=ceil)(fg.tensor(x))
    np.testing.assert_array_equal(np.take_along_axis(x, index.numpy(), -1) if x.size else values.numpy(),
                                  values.numpy())
    if x.size:
        gradcheck(lambda t: F.max_pool1d(t, k, s, p, d, ceil), x)


@pytest.mark.parametrize("k, s, p, d, ceil", [c for c in POOLS if c[3] == 1])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("shape", [(2, 3, 11), (3, 7), (0, 2, 9)])
def test_avg_pool1d_matches_the_loop(k, s, p, d, ceil, count_include_pad, shape, device, rng):
    x = rng.standard_normal(shape)
    expected = np_pool1d(x, k, s or k, p, 1, ceil, "avg", 0.0, count_include_pad)
    got = nn.AvgPool1d(k, s, p, ceil, count_include_pad)(fg.tensor(x, device=device))
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=1e-12, atol=1e-15)
    if x.size:
        gradcheck(lambda t: F.avg_pool1d(t, k, s, p, ceil, count_include_pad), x)


def test_max_pool1d_sends_a_tied_window_gradient_to_one_entry_and_propagates_nan():
    x = fg.tensor([[[0.0, 0.0, 1.0, 1.0, np.nan, 2.0]]], requires_grad=True)
    y = F.max_pool1d(x, 2)
    np.testing.assert_array_equal(y.detach().numpy(), [[[0.0, 1.0, np.nan]]])
    F.max_pool1d(x[..., :4], 2).sum().backward()
    assert x.grad.numpy()[0, 0, :4].sum() == 2 and set(x.grad.numpy()[0, 0, :4]) == {0.0, 1.0}
    values, index = F.max_pool1d(fg.tensor([[1.0, 5.0, 3.0, 2.0, 4.0]]), 2, 2, 1, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), [[1, 5, 4]])
    np.testing.assert_array_equal(index.numpy(), [[0, 1, 4]])


@pytest.mark.parametrize("shape, out", [((2, 3, 12), 4), ((2, 3, 10), 3), ((3, 7), 7), ((1, 2, 5), 1), ((0, 2, 6), 2),
                                        ((2, 3, 4), 6)])
def test_adaptive_avg_pool1d_uses_pytorchs_bins(shape, out, rng):
    x = rng.standard_normal(shape)
    length = shape[-1]
    expected = np.stack([x[..., i * length // out:-(-(i + 1) * length // out)].mean(-1) for i in range(out)], -1)
    got = nn.AdaptiveAvgPool1d(out)(fg.tensor(x))
    assert got.shape == shape[:-1] + (out,)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(F.adaptive_avg_pool1d(fg.tensor(x), (out,)).numpy(), expected, rtol=1e-12)
    if x.size:
        gradcheck(lambda t: F.adaptive_avg_pool1d(t, out), x)


def test_pool1d_errors():
    with pytest.raises(fg.ShapeError, match=r"max_pool1d: expected \(N, C, L\) or \(C, L\), got \(2, 3, 4, 5\)"):
        nn.MaxPool1d(2)(fg.ones(2, 3, 4, 5))
    with pytest.raises(fg.ShapeError, match=r"avg_pool1d: expected \(N, C, L\) or \(C, L\), got \(5,\)"):
        F.avg_pool1d(fg.ones(5), 2)
    with pytest.raises(fg.InvalidArgumentError, match=r"max_pool1d: padding 2 must be at most half the kernel size 3"):
        F.max_pool1d(fg.ones(1, 8), 3, padding=2)
    with pytest.raises(fg.InvalidArgumentError, match=r"avg_pool1d: kernel_size, stride and dilation must be positive "
                                                      r"ints and padding an int >= 0, got kernel_size=0"):
        nn.AvgPool1d(0)(fg.ones(1, 8))
    with pytest.raises(fg.ShapeError, match=r"max_pool1d: input \(1, 2\) is shorter than the kernel span 5 with "
                                            r"padding 0"):
        F.max_pool1d(fg.ones(1, 2), 3, dilation=2)
    with pytest.raises(fg.ShapeError, match=r"adaptive_avg_pool1d: expected \(N, C, L\) or \(C, L\), got \(4,\)"):
        nn.AdaptiveAvgPool1d(2)(fg.ones(4))
    with pytest.raises(fg.InvalidArgumentError, match=r"adaptive_avg_pool1d: output_size must be a positive int, got "
                                                      r"0"):
        F.adaptive_avg_pool1d(fg.ones(1, 4), 0)


def test_parameter_dict_registers_its_parameters():
    pd = nn.ParameterDict({"scale": nn.Parameter(fg.ones(3)), "shift": nn.Parameter(fg.zeros(3))})
    pd["gate"] = fg.full((1,), 2.0)  # a tensor becomes a parameter
    assert list(pd) == ["scale", "shift", "gate"] and len(pd) == 3 and "gate" in pd and "x" not in pd
    assert list(pd.state_dict()) == ["scale", "shift", "gate"] and len(list(pd.parameters())) == 3
    assert pd["gate"].requires_grad and isinstance(pd["gate"], nn.Parameter)
    assert [k for k, _ in pd.items()] == pd.keys() and [v.shape for v in pd.values()] == [(3,), (3,), (1,)]
    opt = fg.optim.SGD(pd.parameters(), lr=1.0)
    (pd["scale"] * pd["gate"]).sum().backward()
    opt.step()
    np.testing.assert_array_equal(pd["scale"].detach().numpy(), [-1, -1, -1])
    np.testing.assert_array_equal(pd["gate"].detach().numpy(), [-1])
    del pd["shift"]
    assert pd.keys() == ["scale", "gate"] and list(pd.state_dict()) == ["scale", "gate"]
    pd.update([("bias", fg.zeros(2))])
    assert pd.keys() == ["scale", "gate", "bias"]
    with pytest.raises(KeyError):
        pd["shift"]
    with pytest.raises(fg.InvalidArgumentError, match=r"ParameterDict: keys must be non-empty strings without '.', "
                                                      r"got 'a.b'"):
        pd["a.b"] = fg.ones(1)
    for taken in ("keys", "training", "_names"):
        with pytest.raises(fg.InvalidArgumentError, match=rf"ParameterDict: key '{taken}' is taken by a ParameterDict "
                                                          r"attribute \(entries are attributes\); choose another name"):
            pd[taken] = fg.ones(1)
    assert pd.keys() == ["scale", "gate", "bias"]
    with pytest.raises(TypeError, match=r"ParameterDict: values must be tensors, got float"):
        pd["x"] = 1.0
    with pytest.raises(fg.InvalidArgumentError, match=r"ParameterDict has no forward: use its parameters"):
        pd()


class WithExtras(nn.Module):
    def __init__(self):
        super().__init__()
        self.extra = nn.ParameterDict({"a": fg.tensor([1.0, 2.0]), "b": fg.tensor([[3.0]])})


def test_parameter_dict_in_a_module_round_trips_state_dict_deepcopy_and_pickle():
    m, other = WithExtras(), WithExtras()
    other.extra["a"].data = fg.zeros(2)
    assert list(m.state_dict()) == ["extra.a", "extra.b"]
    other.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(other.extra["a"].detach().numpy(), [1, 2])
    for twin in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert twin.extra.keys() == ["a", "b"]
        np.testing.assert_array_equal(twin.extra["b"].detach().numpy(), [[3]])


def test_a_compiled_step_with_the_new_modules_equals_eager(rng):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            fg.manual_seed(5)
            self.body = nn.Sequential(nn.Conv1d(2, 6, 3, padding=1), nn.PReLU(6), nn.MaxPool1d(2),
                                      nn.GLU(1), nn.Hardswish(), nn.AvgPool1d(3, 1, 1),
                                      nn.AdaptiveAvgPool1d(2), nn.Flatten(), nn.Unflatten(1, (3, 2)), nn.Flatten(),
                                      nn.Linear(6, 4), nn.SELU(), nn.Hardtanh(-0.5, 0.5), nn.Linear(4, 3),
                                      nn.LogSigmoid())
            self.extra = nn.ParameterDict({"scale": fg.ones(3)})

        def forward(self, x):
            return self.body(x) * self.extra["scale"]

    x = fg.tensor(rng.standard_normal((4, 2, 9)), dtype=fg.float32)
    y = fg.tensor(rng.standard_normal((4, 3)), dtype=fg.float32)

    def loss_fn(out, target):
        return (out - target).square().mean()

    eager, compiled = Net(), Net()
    eager_opt = fg.optim.SGD(eager.parameters(), lr=0.1)
    step = fg.compile(compiled, loss_fn, fg.optim.SGD(compiled.parameters(), lr=0.1), example_inputs=(x, y))
    for _ in range(3):
        eager_opt.zero_grad()
        expected = loss_fn(eager(x), y)
        expected.backward()
        eager_opt.step()
        np.testing.assert_allclose(float(step(x, y)), float(expected), rtol=1e-5)
    for (name, a), (_, b) in zip(eager.named_parameters(), compiled.named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert float(expected) != float(loss_fn(Net()(x), y))  # training moved the loss
