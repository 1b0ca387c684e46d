"""norm_backward, the fused first-order backward of layer_norm and rms_norm (kernels/nn/nn_cpu.cpp):
dx, and the weight and bias gradients summed over row slices that do not depend on the thread
count, against float64 NumPy, by float64 finite differences, on odd shapes, size-0 and size-1
rows, strided inputs and extreme values."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous

F = fg.nn.functional


def np_norm_backward(x, g, w, rms):
    """dx, dw, db of layer_norm (rms: rms_norm) over the last dim, in float64 (default eps)."""
    eps = 1e-6 if rms else 1e-5
    x, g = x.astype(np.float64), g.astype(np.float64)
    w = np.ones(x.shape[-1]) if w is None else w.astype(np.float64)
    if rms:
        rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        xhat = x * rstd
    else:
        rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
        xhat = (x - x.mean(-1, keepdims=True)) * rstd
    gw = g * w
    dx = gw - xhat * (gw * xhat).mean(-1, keepdims=True)
    if not rms:
        dx -= gw.mean(-1, keepdims=True)
    rows = tuple(range(x.ndim - 1))
    return dx * rstd, (g * xhat).sum(rows), g.sum(rows)


def fg_norm_backward(x, g, w, rms, b=None):
    xt = fg.tensor(x, requires_grad=True)
    params = [] if w is None else [fg.tensor(w, requires_grad=True)]
    if not rms and b is not None:
        params.append(fg.tensor(b, requires_grad=True))
    n = x.shape[-1]
    y = F.rms_norm(xt, n, *params[:1]) if rms else F.layer_norm(xt, n, *params)
    return [t.numpy() for t in fg.autograd.grad(y, [xt] + params, fg.tensor(g))]


# (1024, 128): the char transformer's rows, eight slices over the threads; 33 rows: one slice
SHAPES = [(1024, 128), (300, 45), (33, 7), (2, 3, 64), (1, 128), (5, 1), (70, 9)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_match_float64_numpy(rng, shape, rms, dtype):
    x, g = make(rng, shape, dtype), make(rng, shape, dtype)
    w, b = make(rng, shape[-1:], dtype), make(rng, shape[-1:], dtype)
    got = fg_norm_backward(x, g, w, rms, b)
    ref = np_norm_backward(x, g, w, rms)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for name, a, r in zip(("dx", "dw", "db"), got, ref):
        assert a.dtype == dtype, name
        np.testing.assert_allclose(a, r, rtol=tol, atol=tol * np.sqrt(x.size / shape[-1]), err_msg=name)


@pytest.mark.parametrize("rms", [False, True])
def test_without_weight(rng, rms):
    x, g = make(rng, (129, 40), np.float32), make(rng, (129, 40), np.float32)
    (dx,) = fg_norm_backward(x, g, None, rms)
    np.testing.assert_allclose(dx, np_norm_backward(x, g, None, rms)[0], rtol=2e-4, atol=2e-4)


def test_size_zero_rows_give_zero_weight_and_bias_gradients():
    x = np.zeros((0, 16), np.float32)
    dx, dw, db = fg_norm_backward(x, x, np.ones(16, np.float32), False, np.ones(16, np.float32))
    assert dx.shape == (0, 16) and (dw == 0).all() and (db == 0).all() and dw.shape == db.shape == (16,)


@pytest.mark.slow_to_emulate
def test_float64_finite_differences_over_several_slices(rng):
    """70 rows: two slices of partial sums; the residual add's gradient rides along (acc)."""
    x, r, w, b = make(rng, (70, 9)), make(rng, (70, 9)), make(rng, (9,)), make(rng, (9,))
    gradcheck(lambda x_, w_, b_: F.layer_norm(x_, 9, w_, b_) ** 2, x, w, b)
    gradcheck(lambda x_, w_: F.rms_norm(x_, 9, w_) ** 2, x, w)
    gradcheck(lambda x_, r_, w_: F.add_layer_norm(x_, r_, 9, w_)[1] ** 2, x, r, w)


@pytest.mark.parametrize("rms", [False, True])
def test_the_sums_do_not_depend_on_the_thread_count(rng, rms):
    x, g = make(rng, (1024, 128), np.float32), make(rng, (1024, 128), np.float32)
    w, b = make(rng, (128,), np.float32), make(rng, (128,), np.float32)
    threads = fg.get_num_threads()
    try:
        fg.set_num_threads(1)
        one = fg_norm_backward(x, g, w, rms, b)
        fg.set_num_threads(2)
        two = fg_norm_backward(x, g, w, rms, b)
    finally:
        fg.set_num_threads(threads)
    for a, c in zip(one, two):
        np.testing.assert_array_equal(a, c)


def test_strided_input_and_gradient_give_what_contiguous_ones_do(rng):
    x, g, w = make(rng, (65, 45), np.float32), make(rng, (65, 45), np.float32), make(rng, (45,), np.float32)
    xt, gt = non_contiguous(x), non_contiguous(g)
    assert not xt.is_contiguous() and not gt.is_contiguous()
    xt.requires_grad_(True)
    wt = fg.tensor(w, requires_grad=True)
    strided = [t.numpy() for t in fg.autograd.grad(F.layer_norm(xt, 45, wt), [xt, wt], gt)]
    for a, c in zip(strided, fg_norm_backward(x, g, w, False)):
        np.testing.assert_array_equal(a, c)


def test_extreme_rows(rng):
    """A row of huge values is normalised like any other (layer_norm is scale-invariant); a NaN or an
    inf in a row makes that row's dx NaN and leaves the other rows' bits alone."""
    x, g, w = make(rng, (40, 33), np.float32), make(rng, (40, 33), np.float32), make(rng, (33,), np.float32)
    x[2] *= 1e30
    x[5] *= 1e-30
    row = x[2].astype(np.float64)  # squares past float32's range: the forward sums them in double
    np.testing.assert_allclose(F.layer_norm(fg.tensor(x[2:3]), 33).numpy()[0], (row - row.mean()) / row.std(), rtol=1e-5, atol=1e-5)
    dx, dw, db = fg_norm_backward(x, g, w, False, w)
    ref = np_norm_backward(x, g, w, False)
    np.testing.assert_allclose(dx[[2]], ref[0][[2]], rtol=1e-3, atol=1e-33)
    np.testing.assert_allclose(dw, ref[1], rtol=2e-4, atol=2e-4)
    bad = x.copy()
    bad[7, 3], bad[9, 0] = np.nan, np.inf
    dx_bad, dw_bad, db_bad = fg_norm_backward(bad, g, w, False, w)
    assert np.isnan(dx_bad[[7, 9]]).all()
    keep = [i for i in range(40) if i not in (7, 9)]
    np.testing.assert_array_equal(dx_bad[keep], dx[keep])
    np.testing.assert_array_equal(db_bad, db)  # the bias gradient reads only g
    assert np.isnan(dw_bad).all()
