"""The non-GEMM kernels of a training step (issue 23): the fused activation gradients, column and
row sums, and layer_norm / rms_norm with their fused backward — against NumPy, against the
composite rules, by float64 finite differences, on odd, empty, strided and non-finite inputs."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import ODD_SHAPES, gradcheck, make, non_contiguous, on
from reference import GRADIENT

F = fg.nn.functional
ACTIVATIONS = {"relu": fg.relu, "tanh": fg.tanh, "sigmoid": fg.sigmoid, "silu": fg.silu}


def every_other(a):
    """A tensor with a's values at stride 2 in the last dim: strided whatever a's shape."""
    return fg.tensor(np.stack([a, a], axis=-1))[..., 0]


def first_and_second_order(fn, x, g):
    """The gradient of fn at x by the fused first-order kernel and by the composite rule."""
    (fused,) = fg.autograd.grad(fn(x), x, g)
    (composite,) = fg.autograd.grad(fn(x), x, g, create_graph=True)
    return fused, composite.detach()


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_fused_activation_gradient_matches_numpy_and_the_composite(rng, name, shape, device):
    fn = ACTIVATIONS[name]
    _, ref = GRADIENT[name + "_backward"]
    a, ga = make(rng, shape, low=-4, high=4), make(rng, shape)
    for dtype, tol in ((fg.float64, 1e-12), (fg.float32, 2e-6)):
        x = on(device, fg.tensor(a, dtype=dtype)).requires_grad_()
        fused, composite = first_and_second_order(fn, x, on(device, fg.tensor(ga, dtype=dtype)))
        assert fused.shape == x.shape and fused.dtype == dtype
        fg.testing.assert_close(fused, composite, rtol=tol, atol=tol)
        fg.testing.assert_close(fused.cpu().double(), ref(a, ga), rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_fused_activation_gradient_on_strided_inputs(rng, name, device):
    fn = ACTIVATIONS[name]
    _, ref = GRADIENT[name + "_backward"]
    a, ga = make(rng, (45, 65), low=-4, high=4), make(rng, (65, 45))
    x = on(device, non_contiguous(a)).requires_grad_()
    g = on(device, fg.tensor(ga)).transpose(0, 1)  # a strided gradient as well
    (dx,) = fg.autograd.grad(fn(x), x, g)
    fg.testing.assert_close(dx, ref(a, ga.T), rtol=1e-12, atol=1e-12)
    gradcheck(fn, make(rng, (5, 7), low=-3, high=3))


def test_fused_activation_gradients_at_non_finite_and_extreme_inputs(device):
    x = on(device, fg.tensor([np.nan, np.inf, -np.inf, 100.0, -100.0, 0.0])).requires_grad_()
    g = on(device, fg.tensor([2.0] * 6))

    def grad(fn, at=x):
        (dx,) = fg.autograd.grad(fn(at), at, g[: at.shape[0]])
        return dx.cpu().numpy()

    # relu: the gradient passes where x > 0 only (PyTorch's threshold_backward), 0 at 0 and NaN
    np.testing.assert_array_equal(grad(fg.relu), [0, 2, 0, 2, 0, 0])
    np.testing.assert_array_equal(grad(fg.tanh), [np.nan, 0, 0, 0, 0, 2])
    # sigmoid(-100) = 3.7e-44 is a float32 denormal: exp_f32 keeps it (PyTorch flushes it to 0)
    np.testing.assert_allclose(grad(fg.sigmoid), [np.nan, 0, 0, 0, 2 / (1 + np.exp(100.0)), 0.5], rtol=0, atol=3e-45)
    finite = on(device, fg.tensor([np.nan, 100.0, -100.0, 0.0])).requires_grad_()
    np.testing.assert_allclose(grad(fg.silu, finite), [np.nan, 2, 0, 1], atol=1e-30)


@pytest.mark.parametrize("shape", [(45, 65), (1, 5), (5, 1), (0, 3), (3, 0), (700, 3), (3, 700), (2, 900, 37)])
def test_column_sums_match_numpy(rng, shape, device, four_threads):
    """sum/mean over the leading dim(s), the bias gradient of a Linear layer."""
    a = make(rng, shape)
    for dims in ((0,), tuple(range(len(shape) - 1))):
        want = a.sum(axis=dims)
        for t in (fg.tensor(a), every_other(a)):
            fg.testing.assert_close(fg.sum(on(device, t), dim=dims), want, rtol=1e-12, atol=1e-12)
        if a.size:
            fg.testing.assert_close(fg.mean(on(device, fg.tensor(a)), dim=dims), a.mean(axis=dims), rtol=1e-12, atol=1e-12)
        f32 = fg.sum(on(device, fg.tensor(a.astype(np.float32))), dim=dims)
        fg.testing.assert_close(f32, want.astype(np.float32), rtol=2e-6, atol=2e-5)


@pytest.mark.parametrize("shape", [(3000, 100), (1500, 1100), (4, 1000, 600)])
def test_large_column_sums_split_rows_and_column_blocks(rng, shape, device, four_threads):
    a = make(rng, shape, np.float32)
    want = a.astype(np.float64).sum(axis=len(shape) - 2)
    got = fg.sum(on(device, fg.tensor(a)), dim=len(shape) - 2)
    fg.testing.assert_close(got, want.astype(np.float32), rtol=1e-6, atol=1e-4)
    ints = rng.integers(-(2 ** 50), 2 ** 50, size=(3000, 3))  # beyond double's 2^53: int64 sums stay exact
    assert fg.sum(on(device, fg.tensor(ints)), dim=0).cpu().numpy().tolist() == [sum(map(int, c)) for c in ints.T]


def test_bias_gradient_of_linear_is_the_column_sum(rng, device, four_threads):
    x, w, b, g = make(rng, (2000, 7)), make(rng, (5, 7)), make(rng, (5,)), make(rng, (2000, 5))
    bias = on(device, fg.tensor(b)).requires_grad_()
    out = F.linear(on(device, fg.tensor(x)), on(device, fg.tensor(w)), bias)
    (db,) = fg.autograd.grad(out, bias, on(device, fg.tensor(g)))
    fg.testing.assert_close(db, g.sum(axis=0), rtol=1e-12, atol=1e-12)
    gradcheck(lambda b_: F.linear(fg.tensor(x[:9]), fg.tensor(w), b_), b)


@pytest.mark.parametrize("r", [0, 1, 7, 8, 9, 65, 5003])
def test_row_sums_match_numpy(rng, r, device):
    a = make(rng, (3, r))
    fg.testing.assert_close(fg.sum(on(device, fg.tensor(a)), dim=1), a.sum(axis=1), rtol=1e-12, atol=1e-12)
    if r:
        fg.testing.assert_close(fg.mean(on(device, fg.tensor(a)), dim=-1), a.mean(axis=1), rtol=1e-12, atol=1e-12)
    ints = rng.integers(-5, 5, size=(3, r))
    np.testing.assert_array_equal(fg.sum(on(device, fg.tensor(ints)), dim=1).cpu().numpy(), ints.sum(axis=1))


def test_sums_propagate_inf_and_nan_like_numpy(device):
    a = np.array([[1.0, np.inf, np.nan, np.inf], [2.0, 3.0, 4.0, -np.inf]] * 9)
    with np.errstate(invalid="ignore"):
        want0, want1 = a.sum(axis=0), a.sum(axis=1)
    np.testing.assert_array_equal(fg.sum(on(device, fg.tensor(a)), dim=0).cpu().numpy(), want0)
    np.testing.assert_array_equal(fg.sum(on(device, fg.tensor(a)), dim=1).cpu().numpy(), want1)


def np_norm(a, w, b, eps, rms):
    mean = 0 if rms else a.mean(axis=-1, keepdims=True)
    var = (a * a).mean(axis=-1, keepdims=True) if rms else a.var(axis=-1, keepdims=True)
    y = (a - mean) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def norm(x, cols, w, b, rms):
    return F.rms_norm(x, cols, w) if rms else F.layer_norm(x, cols, w, b)


NORM_CASES = [(False, True, True), (False, True, False), (False, False, True), (False, False, False),
              (True, True, False), (True, False, False)]  # (rms, weight, bias)


@pytest.mark.parametrize("rms,has_w,has_b", NORM_CASES)
@pytest.mark.parametrize("shape", [(45, 65), (4, 3, 8), (6, 1), (0, 5), (3, 13)])
def test_norm_forward_and_fused_backward(rng, rms, has_w, has_b, shape, device):
    cols = shape[-1]
    a, ga = make(rng, shape), make(rng, shape)
    w = make(rng, (cols,), low=0.5, high=1.5) if has_w else None
    b = make(rng, (cols,)) if has_b else None
    for dtype, tol in ((fg.float64, 1e-10), (fg.float32, 2e-4)):
        x = on(device, fg.tensor(a, dtype=dtype)).requires_grad_()
        params = [on(device, fg.tensor(p, dtype=dtype)).requires_grad_() if p is not None else None for p in (w, b)]
        y = norm(x, cols, *params, rms)
        fg.testing.assert_close(y.cpu().double(), np_norm(a, w, b, 1e-6 if rms else 1e-5, rms), rtol=tol, atol=tol)
        inputs = [x] + [p for p in params if p is not None]
        g = on(device, fg.tensor(ga, dtype=dtype))
        fused = fg.autograd.grad(norm(x, cols, *params, rms), inputs, g)
        composite = fg.autograd.grad(norm(x, cols, *params, rms), inputs, g, create_graph=True)
        for f, c in zip(fused, composite):
            fg.testing.assert_close(f, c.detach(), rtol=tol, atol=tol)
    if rms:
        gradcheck(lambda v: F.rms_norm(v, cols, None if w is None else fg.tensor(w)) * fg.tensor(ga), a)
    else:
        gradcheck(lambda v: F.layer_norm(v, cols, None if w is None else fg.tensor(w),
                                         None if b is None else fg.tensor(b)) * fg.tensor(ga), a)


def test_norm_on_strided_and_offset_rows(rng, device):
    a = make(rng, (65, 45))
    x = on(device, non_contiguous(a.T.copy())).requires_grad_()  # (45, 65), transposed layout
    fg.testing.assert_close(F.layer_norm(x, 65), np_norm(a.T, None, None, 1e-5, False), rtol=1e-10, atol=1e-10)
    shifted = a.T + 1e4  # a large mean: the variance is taken around it, not as E[x^2] - E[x]^2
    y = F.layer_norm(on(device, fg.tensor(shifted.astype(np.float32))), 65)
    fg.testing.assert_close(y.cpu().double(), np_norm(a.T, None, None, 1e-5, False), rtol=2e-3, atol=2e-3)


def test_norm_propagates_non_finite_rows_only(device):
    a = np.tile(np.linspace(-1, 1, 9), (3, 1))
    a[1, 4] = np.inf
    y = F.layer_norm(on(device, fg.tensor(a)), 9).cpu().numpy()
    assert np.isnan(y[1]).all()
    np.testing.assert_allclose(y[[0, 2]], np_norm(a[[0, 2]], None, None, 1e-5, False), rtol=1e-10)


@pytest.mark.parametrize("rms", [False, True])
def test_norm_weight_and_bias_gradients_from_many_rows(rng, rms, device, four_threads):
    """Rows split over threads, each with its own column sums: dweight = sum(g * xhat), dbias = sum(g)."""
    a, ga = make(rng, (600, 301)), make(rng, (600, 301))
    w, b = make(rng, (301,), low=0.5, high=1.5), make(rng, (301,))
    x, weight, bias = (on(device, fg.tensor(v)).requires_grad_() for v in (a, w, b))
    inputs = [x, weight] if rms else [x, weight, bias]
    grads = fg.autograd.grad(norm(x, 301, weight, bias, rms), inputs, on(device, fg.tensor(ga)))
    xhat = np_norm(a, None, None, 1e-6 if rms else 1e-5, rms)
    fg.testing.assert_close(grads[1], (ga * xhat).sum(axis=0), rtol=1e-10, atol=1e-10)
    if not rms:
        fg.testing.assert_close(grads[2], ga.sum(axis=0), rtol=1e-12, atol=1e-12)
    composite = fg.autograd.grad(norm(x, 301, weight, bias, rms), inputs, on(device, fg.tensor(ga)), create_graph=True)
    for f, c in zip(grads, composite):
        fg.testing.assert_close(f, c.detach(), rtol=1e-10, atol=1e-10)
