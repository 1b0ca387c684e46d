"""add_layer_norm: the residual sum s = x + r and layer_norm(s) in one op (F.add_layer_norm, and
what the plan's fuse_add_norm pass makes), checked against NumPy, against the separate add and
layer_norm (the same bits), by float64 finite differences, and its fused backward (norm_backward
accumulating the residual's gradient) against the composite rule."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on

F = fg.nn.functional


def np_layer_norm(a, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(a.ndim - k, a.ndim))
    y = (a - a.mean(axes, keepdims=True)) / np.sqrt(a.var(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def f64(a):
    return fg.tensor(a, dtype=fg.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,k", [((3, 45, 65), 1), ((200, 9), 1), ((4, 6, 5), 2), ((1, 1), 1), ((5, 1), 1),
                                     ((0, 8), 1), ((7,), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_matches_numpy_and_the_separate_add_and_layer_norm(rng, dtype, shape, k, affine, device):
    x, r = make(rng, shape, dtype), make(rng, shape, dtype)
    norm = shape[len(shape) - k:]
    w, b = (make(rng, norm, dtype), make(rng, norm, dtype)) if affine else (None, None)
    t = [None if a is None else fg.tensor(a).to(device) for a in (x, r, w, b)]
    s, y = F.add_layer_norm(t[0], t[1], norm, t[2], t[3])
    assert s.shape == y.shape == shape and s.dtype == y.dtype == t[0].dtype and s.device == device
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_array_equal(s.cpu().numpy(), x + r)
    if x.size:
        np.testing.assert_allclose(y.cpu().numpy(), np_layer_norm(x.astype(np.float64) + r, k, w, b), rtol=tol, atol=tol)
    separate = F.layer_norm(t[0] + t[1], norm, t[2], t[3])
    np.testing.assert_array_equal(y.cpu().numpy(), separate.cpu().numpy())


def test_strided_inputs_give_what_contiguous_ones_do(rng, device):
    x, r, w = make(rng, (33, 17), np.float32), make(rng, (33, 17), np.float32), make(rng, (17,), np.float32)
    xt, rt = on(device, non_contiguous(x)), on(device, non_contiguous(r))
    assert not xt.is_contiguous() and not rt.is_contiguous()
    s, y = F.add_layer_norm(xt, rt, 17, fg.tensor(w).to(device))
    s2, y2 = F.add_layer_norm(fg.tensor(x).to(device), fg.tensor(r).to(device), 17, fg.tensor(w).to(device))
    np.testing.assert_array_equal(s.cpu().numpy(), s2.cpu().numpy())
    np.testing.assert_array_equal(y.cpu().numpy(), y2.cpu().numpy())
    np.testing.assert_allclose(y.cpu().numpy(), np_layer_norm((x + r).astype(np.float64), 1, w), rtol=1e-4, atol=1e-4)


def test_extreme_values_match_the_separate_ops(device):
    rows = np.array([[1e30, -1e30, 3e29, 0.0], [1e6 + 1, 1e6 - 1, 1e6, 1e6], [np.inf, 1.0, 2.0, 3.0],
                     [np.nan, 0.0, 0.0, 0.0], [3e38, 3e38, -1.0, 1.0], [1e-30, -1e-30, 0.0, 0.0]], np.float32)
    res = np.full_like(rows, 0.5)
    x, r = fg.tensor(rows).to(device), fg.tensor(res).to(device)
    s, y = F.add_layer_norm(x, r, 4)
    np.testing.assert_array_equal(s.cpu().numpy(), rows + res)
    np.testing.assert_array_equal(y.cpu().numpy(), F.layer_norm(x + r, 4).cpu().numpy())
    assert np.isfinite(y.cpu().numpy()[[0, 1, 5]]).all()


def test_gradcheck_through_both_outputs(rng):
    x, r, w, b = make(rng, (3, 4, 5)), make(rng, (3, 4, 5)), make(rng, (5,)), make(rng, (5,))
    weights = fg.arange(5, dtype=fg.float64)

    def fn(x_, r_, w_, b_):
        s, y = F.add_layer_norm(x_, r_, 5, w_, b_)
        return y * weights + s ** 2

    gradcheck(fn, x, r, w, b)
    gradcheck(lambda x_, r_: F.add_layer_norm(x_, r_, (4, 5))[1] ** 2, x, r)  # no weight, two dims
    gradcheck(lambda x_, r_: F.add_layer_norm(x_, r_, 5)[0] * 3, x, r)  # y unused: only s's gradient


def test_fused_backward_matches_the_composite_rule(rng):
    x, r = (f64(make(rng, (6, 3, 8))).requires_grad_() for _ in range(2))
    w, b = (f64(make(rng, (8,))).requires_grad_() for _ in range(2))
    gs, gy = f64(make(rng, (6, 3, 8))), f64(make(rng, (6, 3, 8)))

    def run(create_graph):
        s, y = F.add_layer_norm(x, r, 8, w, b)
        return [t.detach() for t in fg.autograd.grad([s, y], [x, r, w, b], [gs, gy], create_graph=create_graph)]

    fused, composite = run(False), run(True)
    for a, c in zip(fused, composite):
        fg.testing.assert_close(a, c, rtol=1e-10, atol=1e-12)
    fg.testing.assert_close(fused[0], fused[1].numpy(), rtol=0, atol=0)  # x and r get one gradient
    ref = [t.detach() for t in fg.autograd.grad([x + r, F.layer_norm(x + r, 8, w, b)], [x, r, w, b], [gs, gy])]
    for a, c in zip(fused, ref):
        fg.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_second_order_gradients_reach_both_inputs(rng):
    x, r = (f64(make(rng, (4, 6))).requires_grad_() for _ in range(2))
    (gx,) = fg.autograd.grad(F.add_layer_norm(x, r, 6)[1].pow(3).sum(), [x], create_graph=True)
    hx, hr = fg.autograd.grad(gx.sum(), [x, r])
    s = (x + r).detach().requires_grad_()
    (gs,) = fg.autograd.grad(F.layer_norm(s, 6).pow(3).sum(), [s], create_graph=True)
    (hs,) = fg.autograd.grad(gs.sum(), [s])
    fg.testing.assert_close(hx, hs.numpy(), rtol=1e-10, atol=1e-12)
    fg.testing.assert_close(hr, hs.numpy(), rtol=1e-10, atol=1e-12)


def test_errors_name_the_op_and_the_shapes(rng):
    x = f64(make(rng, (3, 5)))
    with pytest.raises(fg.ShapeError, match=r"add_layer_norm: input \(3, 5\) and residual \(5,\) must have the same shape"):
        F.add_layer_norm(x, f64(make(rng, (5,))), 5)
    with pytest.raises(fg.DTypeError, match="add_layer_norm: input and residual must have one dtype, got .*float64.*float32"):
        F.add_layer_norm(x, fg.tensor(make(rng, (3, 5), np.float32)), 5)
    with pytest.raises(fg.ShapeError, match=r"add_layer_norm: normalized_shape \(4,\) must equal the trailing dims"):
        F.add_layer_norm(x, x, 4)
    with pytest.raises(fg.ShapeError, match=r"add_layer_norm: weight has shape \(3,\), expected \(5,\)"):
        F.add_layer_norm(x, x, 5, fg.ones(3, dtype=fg.float64))
    with pytest.raises(fg.ShapeError, match=r"add_layer_norm: bias has shape \(2,\), expected \(5,\)"):
        F.add_layer_norm(x, x, 5, None, fg.ones(2, dtype=fg.float64))
    with pytest.raises(fg.DTypeError, match="add_layer_norm: expected a floating tensor"):
        F.add_layer_norm(fg.ones(3, 5, dtype=fg.int64), fg.ones(3, 5, dtype=fg.int64), 5)


def test_half_inputs_compute_in_float32_like_layer_norm(rng):
    x, r = make(rng, (6, 16), np.float32), make(rng, (6, 16), np.float32)
    xb, rb = fg.tensor(x).to(fg.bfloat16), fg.tensor(r).to(fg.bfloat16)
    s, y = F.add_layer_norm(xb, rb, 16)
    assert s.dtype == y.dtype == fg.bfloat16
    exact = xb.float().numpy().astype(np.float64) + rb.float().numpy()
    np.testing.assert_array_equal(s.float().numpy(), (xb.float() + rb.float()).to(fg.bfloat16).float().numpy())
    np.testing.assert_allclose(y.float().numpy(), np_layer_norm(exact, 1), rtol=2e-2, atol=2e-2)
