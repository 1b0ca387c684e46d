"""The linear op (x @ W^T + b in one GEMM onto the bias): NumPy references over odd shapes, leading
dims, strided operands and dtypes; float64 finite differences; every error it raises."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on

F = fg.nn.functional

SHAPES = [  # (x shape, out_features)
    ((45, 65), 33),
    ((65,), 7),         # 1-D input: one row
    ((2, 3, 4), 5),     # leading dims
    ((2, 1, 3, 5), 1),  # size-1 dims
    ((0, 6), 4),        # size-0 batch
    ((3, 0), 2),        # in_features = 0: the result is the bias
    ((4, 3), 0),        # out_features = 0
]


def t(a, device, dtype=fg.float64):
    return fg.tensor(a, dtype=dtype, device=device)


@pytest.mark.parametrize("shape,n", SHAPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_matches_numpy(rng, device, shape, n, with_bias):
    x, w, b = make(rng, shape), make(rng, (n, shape[-1])), make(rng, (n,))
    want = x @ w.T + (b if with_bias else 0)
    got = F.linear(t(x, device), t(w, device), t(b, device) if with_bias else None)
    assert got.shape == want.shape and got.device.type == device
    fg.testing.assert_close(got, want)
    got32 = F.linear(t(x, device, fg.float32), t(w, device, fg.float32), t(b, device, fg.float32) if with_bias else None)
    assert got32.dtype == fg.float32
    np.testing.assert_allclose(got32.numpy(), want, rtol=1e-5, atol=1e-5)


def test_linear_is_one_op_in_eager_and_in_traces(rng):
    x, w, b = fg.tensor(make(rng, (8, 5))), fg.tensor(make(rng, (3, 5))), fg.tensor(make(rng, (3,)))
    assert F.linear(x, w, b).grad_fn is None  # no autograd without requires_grad
    w.requires_grad_(True)
    assert F.linear(x, w, b).grad_fn == "<LinearBackward>"  # one node, not matmul then add
    layer = fg.nn.Linear(5, 3)
    for p in layer.parameters():
        p.requires_grad_(False)
    x = x.float()
    step = fg.compile(lambda v: layer(v).sum(), example_inputs=(x,))
    np.testing.assert_allclose(step(x).item(), F.linear(x, layer.weight, layer.bias).sum().item(), rtol=1e-6)
    ops = [r["op"] for r in step.explain().rows]
    assert ops[0] == "linear" and "matmul" not in ops and "add" not in ops, ops


@pytest.mark.parametrize("layout", ["transposed", "sliced", "strided_rows"])
def test_linear_strided_input(rng, device, layout):
    w, b = make(rng, (6, 7)), make(rng, (6,))
    if layout == "transposed":
        x = make(rng, (9, 7))
        xt = on(device, non_contiguous(x))
    elif layout == "sliced":  # rows a stride of 2 apart, columns contiguous
        base = make(rng, (2, 18, 7))
        x, xt = base[:, ::2], t(base, device)[:, ::2]
    else:  # leading dims that do not merge into one stride: copied
        base = make(rng, (4, 5, 7))
        x, xt = base[:, 1:4], t(base, device)[:, 1:4]
    assert not xt.is_contiguous()
    fg.testing.assert_close(F.linear(xt, t(w, device), t(b, device)), x @ w.T + b)


def test_linear_strided_weight(rng, device):
    x, w_in_out, b = make(rng, (5, 4)), make(rng, (4, 3)), make(rng, (3,))  # weight given as (in, out).T
    w = t(w_in_out, device).transpose(0, 1)
    assert not w.is_contiguous()
    fg.testing.assert_close(F.linear(t(x, device), w, t(b, device)), x @ w_in_out + b)


def test_linear_half_and_mixed_dtypes(rng, device):
    x, w, b = make(rng, (6, 8)), make(rng, (5, 8)), make(rng, (5,))
    got = F.linear(t(x, device, fg.float16), t(w, device, fg.float16), t(b, device, fg.float16))
    assert got.dtype == fg.float16
    want = x.astype(np.float16).astype(np.float32) @ w.astype(np.float16).astype(np.float32).T + b.astype(np.float16)
    np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-3, atol=2e-3)
    mixed = F.linear(t(x, device, fg.float32), t(w, device), t(b, device, fg.float32))
    assert mixed.dtype == fg.float64
    fg.testing.assert_close(mixed, x.astype(np.float32).astype(np.float64) @ w.T + b.astype(np.float32))


@pytest.mark.parametrize("shape", [(3, 4), (4,), (2, 3, 4)])
def test_linear_gradients(rng, shape):
    x, w, b = make(rng, shape), make(rng, (5, 4)), make(rng, (5,))
    gradcheck(F.linear, x, w, b)
    gradcheck(lambda x, w: F.linear(x, w) ** 2, x, w)  # no bias; second order through dY


def test_linear_gradients_match_numpy(rng, device):
    x, w, b, g = make(rng, (2, 3, 4)), make(rng, (5, 4)), make(rng, (5,)), make(rng, (2, 3, 5))
    xs, ws, bs = (t(a, device).requires_grad_(True) for a in (x, w, b))
    (F.linear(xs, ws, bs) * t(g, device)).sum().backward()
    fg.testing.assert_close(xs.grad, g @ w)
    fg.testing.assert_close(ws.grad, g.reshape(-1, 5).T @ x.reshape(-1, 4))
    fg.testing.assert_close(bs.grad, g.sum(axis=(0, 1)))


def test_linear_gradients_size0_batch(device):
    xs = fg.zeros(0, 4, dtype=fg.float64, device=device, requires_grad=True)
    ws = fg.ones(3, 4, dtype=fg.float64, device=device, requires_grad=True)
    bs = fg.ones(3, dtype=fg.float64, device=device, requires_grad=True)
    F.linear(xs, ws, bs).sum().backward()
    assert xs.grad.shape == (0, 4)
    np.testing.assert_array_equal(ws.grad.numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(bs.grad.numpy(), np.zeros(3))


def test_linear_extreme_values(device):
    x = t(np.array([[1e300, -1e300], [np.inf, 0.0]]), device)
    w = t(np.array([[1.0, 0.0]]), device)
    got = F.linear(x, w, t(np.array([np.nan]), device)).numpy()
    assert np.isnan(got).all()
    got = F.linear(x, w, t(np.array([1.0]), device)).numpy()
    np.testing.assert_array_equal(got, [[1e300 + 1.0], [np.inf]])


def test_linear_errors(rng):
    x, w = fg.tensor(make(rng, (2, 3, 4))), fg.tensor(make(rng, (5, 4)))
    with pytest.raises(fg.ShapeError, match=r"linear: input \(2, 3, 4\) does not end in in_features = 3 of weight \(5, 3\)"):
        F.linear(x, fg.ones(5, 3, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"linear: weight must be \(out_features, in_features\), got \(4,\)"):
        F.linear(x, fg.ones(4, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"linear: bias must be \(5,\) for weight \(5, 4\), got \(4,\)"):
        F.linear(x, w, fg.ones(4, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"linear: bias must be \(5,\) for weight \(5, 4\), got \(1, 5\)"):
        F.linear(x, w, fg.ones(1, 5, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"linear: input \(\) does not end in in_features = 4"):
        F.linear(fg.tensor(1.0, dtype=fg.float64), w)
    with pytest.raises(fg.DTypeError, match="linear: not defined for bool tensors"):
        F.linear(fg.ones(2, 4, dtype=fg.bool), fg.ones(3, 4, dtype=fg.bool))


@pytest.mark.skipif(not fg.cuda.is_available(), reason="needs a GPU: linear's operands on two devices")
def test_linear_device_mismatch(rng):
    x, w = fg.tensor(make(rng, (2, 4))), fg.tensor(make(rng, (5, 4)), device="cuda")
    with pytest.raises(fg.DeviceError, match="linear: expected all tensors on one device"):
        F.linear(x, w)
