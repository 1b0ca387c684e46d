"""The tensor functions composed in Python (flowgrad/_composite.py) against NumPy: masks of
NaN/inf, any/all, isclose/allclose, tril/triu/diag/outer, roll, lerp, bmm, meshgrid, unbind,
masked_select, norms (finite gradients at the origin), Tensor.new_*/type_as, inference_mode; float64
finite differences, devices, and the documented errors."""
import math

import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck

SPECIAL = np.array([[1.0, np.nan, -np.inf], [0.0, np.inf, -2.5]], np.float32)


def test_nan_inf_finite_masks(device):
    t = fg.tensor(SPECIAL, device=device)
    np.testing.assert_array_equal(fg.isnan(t).cpu().numpy(), np.isnan(SPECIAL))
    np.testing.assert_array_equal(t.isinf().cpu().numpy(), np.isinf(SPECIAL))
    np.testing.assert_array_equal(fg.isfinite(t).cpu().numpy(), np.isfinite(SPECIAL))
    i = fg.tensor([1, 2], device=device)
    assert fg.isnan(i).dtype == fg.bool and not fg.isnan(i).cpu().numpy().any() and fg.isfinite(i).cpu().numpy().all()


@pytest.mark.parametrize("dim, keepdim", [(None, False), (0, False), (1, True), ((0, 1), False)])
def test_any_all(dim, keepdim, device):
    a = np.array([[0, 2, 0], [0, 0, 0]], np.float32)
    for value in (a, a != 0):
        t = fg.tensor(value, device=device)
        axis = dim if not isinstance(dim, tuple) else tuple(dim)
        np.testing.assert_array_equal(fg.any(t, dim, keepdim).cpu().numpy(), np.any(value, axis=axis, keepdims=keepdim))
        np.testing.assert_array_equal(t.all(dim, keepdim).cpu().numpy(), np.all(value, axis=axis, keepdims=keepdim))


def test_isclose_and_allclose(device):
    a = np.array([1.0, np.inf, -np.inf, np.nan, 1e-9, 100.0], np.float64)
    b = np.array([1.0 + 1e-7, np.inf, np.inf, np.nan, 0.0, 100.1], np.float64)
    ta, tb = fg.tensor(a, device=device), fg.tensor(b, device=device)
    for equal_nan in (False, True):
        np.testing.assert_array_equal(fg.isclose(ta, tb, equal_nan=equal_nan).cpu().numpy(),
                                      np.isclose(a, b, equal_nan=equal_nan))
    assert fg.allclose(ta[:2], tb[:2]) is True and fg.allclose(ta, tb) is False
    assert fg.allclose(fg.tensor([1, 2]), fg.tensor([1, 2]))
    with pytest.raises(fg.DTypeError, match=r"isclose: input is flowgrad.float64 and other flowgrad.float32"):
        fg.isclose(ta, fg.ones(6))


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
def test_tril_triu(k, device, rng):
    a = rng.standard_normal((2, 4, 5)).astype(np.float32)
    a[0, 0, 4] = np.inf  # masked entries become 0, even infinite ones
    t = fg.tensor(a, device=device)
    np.testing.assert_array_equal(fg.tril(t, k).cpu().numpy(), np.tril(a, k))
    np.testing.assert_array_equal(t.triu(k).cpu().numpy(), np.triu(a, k))
    ints = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(fg.tril(fg.tensor(ints), k).numpy(), np.tril(ints, k))


@pytest.mark.parametrize("k", [-3, -1, 0, 2, 7])
def test_diag_both_ways(k, device, rng):
    v = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_array_equal(fg.diag(fg.tensor(v, device=device), k).cpu().numpy(), np.diag(v, k))
    m = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(fg.tensor(m, device=device).diag(k).cpu().numpy(), np.diag(m, k))


def test_outer_roll_lerp_bmm(device, rng):
    a, b = rng.standard_normal(3), rng.standard_normal(4)
    np.testing.assert_array_equal(fg.outer(fg.tensor(a, device=device), fg.tensor(b, device=device)).cpu().numpy(),
                                  np.outer(a, b))
    x = np.arange(24).reshape(2, 3, 4)
    t = fg.tensor(x, device=device)
    for shifts, dims in [(1, 0), (-2, 2), (5, 1), ((1, -1), (0, 2)), (7, None), (0, 1)]:
        np.testing.assert_array_equal(fg.roll(t, shifts, dims).cpu().numpy(), np.roll(x, shifts, dims))
    s, e = rng.standard_normal(5), rng.standard_normal(5)
    for w in (0.0, 0.25, 0.5, 1.0, 1.5):
        np.testing.assert_allclose(fg.lerp(fg.tensor(s), fg.tensor(e), w).numpy(), s + w * (e - s), rtol=1e-12)
    assert fg.lerp(fg.tensor(s), fg.tensor(e), 1.0).numpy().tolist() == e.tolist()  # exact at the end
    np.testing.assert_allclose(fg.lerp(fg.tensor(s), fg.tensor(e), fg.tensor(np.full(5, 0.75))).numpy(),
                               s + 0.75 * (e - s), rtol=1e-12)
    p, q = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(fg.bmm(fg.tensor(p, device=device), fg.tensor(q, device=device)).cpu().numpy(), p @ q,
                               rtol=1e-12)


def test_meshgrid_unbind_masked_select(device):
    a, b, c = np.arange(3.0), np.arange(4.0), np.arange(2.0)
    for indexing in ("ij", "xy"):
        got = fg.meshgrid(*[fg.tensor(v, device=device) for v in (a, b, c)], indexing=indexing)
        for g, e in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
            np.testing.assert_array_equal(g.cpu().numpy(), e)
    x = np.arange(12.0).reshape(3, 4)
    parts = fg.tensor(x, device=device).unbind(1)
    assert len(parts) == 4 and all((p.cpu().numpy() == x[:, i]).all() for i, p in enumerate(parts))
    mask = np.array([True, False, True, True])
    np.testing.assert_array_equal(fg.masked_select(fg.tensor(x, device=device), fg.tensor(mask, device=device))
                                  .cpu().numpy(), x[np.broadcast_to(mask, x.shape)])


@pytest.mark.parametrize("ord", [2, 1, 3, 2.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("dim, keepdim", [(None, False), (1, True), ((0, 2), False)])
def test_vector_norm_matches_numpy(ord, dim, keepdim, device, rng):
    a = rng.standard_normal((3, 4, 2))
    got = fg.linalg.vector_norm(fg.tensor(a, device=device), ord, dim, keepdim).cpu().numpy()
    flat = a if dim is None else a
    axis = None if dim is None else dim
    if ord == 0:
        expected = np.count_nonzero(flat, axis=axis, keepdims=keepdim).astype(np.float64)
    elif ord in (math.inf, -math.inf):
        expected = (np.max if ord > 0 else np.min)(np.abs(flat), axis=axis, keepdims=keepdim)
    else:
        expected = np.sum(np.abs(flat) ** ord, axis=axis, keepdims=keepdim) ** (1 / ord)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_norm_gradients_are_finite_at_the_origin_and_checked_elsewhere(rng):
    for ord in (2, 3):
        x = fg.zeros(3, dtype=fg.float64, requires_grad=True)
        fg.linalg.vector_norm(x, ord).backward()
        np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])  # PyTorch's subgradient, not NaN
    for ord in (2, 1.5, 3):
        gradcheck(lambda t: fg.linalg.vector_norm(t, ord, 1), rng.standard_normal((2, 3)) + 0.1)
    gradcheck(lambda t: t.norm(), rng.standard_normal((2, 3)))
    gradcheck(lambda t: fg.nn.functional.normalize(t, dim=1), rng.standard_normal((3, 4)))


def test_norms_of_empty_and_0d_tensors_keep_their_shape():
    for ord in (2, 1, 3):
        empty = fg.linalg.vector_norm(fg.ones(0), ord)
        assert empty.shape == () and empty.item() == 0
        assert fg.linalg.vector_norm(fg.tensor(-3.0), ord).shape == ()
    assert fg.linalg.vector_norm(fg.tensor(-3.0)).item() == 3.0
    assert fg.nn.functional.kl_div(fg.tensor(0.5), fg.tensor(0.0), reduction="none").shape == ()


def test_matrix_norm_and_tensor_norm(rng):
    a = rng.standard_normal((3, 4))
    t = fg.tensor(a)
    np.testing.assert_allclose(fg.linalg.norm(t).item(), np.linalg.norm(a), rtol=1e-12)
    np.testing.assert_allclose(fg.linalg.norm(t, "fro", (0, 1)).item(), np.linalg.norm(a, "fro"), rtol=1e-12)
    np.testing.assert_allclose(t.norm(1, 0).numpy(), np.linalg.norm(a, 1, axis=0), rtol=1e-12)
    with pytest.raises(fg.InvalidArgumentError, match=r"norm: ord 'nuc' needs a singular value decomposition"):
        fg.linalg.norm(t, "nuc")
    with pytest.raises(fg.InvalidArgumentError, match=r"vector_norm: ord must be 0, inf, -inf or a number >= 1, "
                                                      r"got 0.5"):
        fg.linalg.vector_norm(t, 0.5)
    with pytest.raises(fg.DTypeError, match=r"vector_norm: expected a floating tensor, got flowgrad.int64"):
        fg.linalg.vector_norm(fg.tensor([1, 2]))


@pytest.mark.parametrize("fn, arrays", [
    (lambda t: fg.tril(t, -1), [(4, 3)]), (lambda t: fg.triu(t, 1), [(3, 4)]), (lambda t: fg.diag(t, 1), [(4,)]),
    (lambda t: fg.diag(t, -1), [(3, 4)]), (lambda a, b: fg.outer(a, b), [(3,), (2,)]),
    (lambda t: fg.roll(t, (1, 2), (0, 1)), [(3, 4)]), (lambda a, b: fg.lerp(a, b, 0.7), [(4,), (4,)]),
    (lambda a, b: fg.bmm(a, b), [(2, 2, 3), (2, 3, 2)]), (lambda t: fg.stack(fg.unbind(t, 1), 0), [(2, 3)]),
])
def test_gradients_by_finite_differences(fn, arrays, rng):
    gradcheck(fn, *[rng.standard_normal(s) for s in arrays])


def test_new_tensors_type_as_and_inference_mode(device):
    x = fg.ones(2, dtype=fg.float64, device=device)
    for t, value in [(x.new_zeros(2, 3), 0), (x.new_ones((3,)), 1), (x.new_full((2,), 7.5), 7.5),
                     (x.new_tensor([4.0, 5.0]), None)]:
        assert t.dtype == fg.float64 and t.device == device
        if value is not None:
            assert (t.cpu().numpy() == value).all()
    assert x.new_zeros(2, dtype=fg.int32).dtype == fg.int32 and x.new_empty(3).shape == (3,)
    assert fg.ones(2).type_as(x).dtype == fg.float64
    w = fg.ones(2, requires_grad=True)
    with fg.inference_mode():
        assert not (w * 2).requires_grad
    assert fg.inference_mode()(lambda: (w * 2).requires_grad)() is False
    with fg.inference_mode(False):
        assert (w * 2).requires_grad


def test_errors_name_the_function():
    with pytest.raises(fg.ShapeError, match=r"tril: expected a tensor of at least 2 dims, got shape \(3,\)"):
        fg.tril(fg.ones(3))
    with pytest.raises(fg.ShapeError, match=r"diag: expected a 1-D or 2-D tensor, got shape \(2, 2, 2\)"):
        fg.diag(fg.ones(2, 2, 2))
    with pytest.raises(fg.ShapeError, match=r"outer: expected two 1-D tensors, got shapes \(2, 2\) and \(3,\)"):
        fg.outer(fg.ones(2, 2), fg.ones(3))
    with pytest.raises(fg.ShapeError, match=r"bmm: expected \(b, n, m\) and \(b, m, p\), got \(2, 3, 4\) and "
                                            r"\(2, 5, 6\)"):
        fg.bmm(fg.ones(2, 3, 4), fg.ones(2, 5, 6))
    with pytest.raises(fg.InvalidArgumentError, match=r"roll: 2 shifts for 1 dims"):
        fg.roll(fg.ones(3), (1, 2), (0,))
    with pytest.raises(fg.IndexOutOfRangeError, match=r"roll: dim 3 is out of range"):
        fg.roll(fg.ones(3), 1, 3)
    with pytest.raises(fg.InvalidArgumentError, match=r"meshgrid: indexing must be 'ij' or 'xy', got 'yx'"):
        fg.meshgrid(fg.ones(2), indexing="yx")
    with pytest.raises(fg.ShapeError, match=r"meshgrid: tensor 1 has shape \(2, 2\); expected 1-D tensors"):
        fg.meshgrid(fg.ones(2), fg.ones(2, 2))
    with pytest.raises(fg.IndexOutOfRangeError, match=r"unbind: dim 2 is out of range"):
        fg.unbind(fg.ones(2, 2), 2)
    with pytest.raises(fg.DTypeError, match=r"masked_select: mask must be bool, got flowgrad.int64"):
        fg.masked_select(fg.ones(2), fg.tensor([1, 0]))
    with pytest.raises(fg.ShapeError, match=r"masked_select: shapes \(2, 3\) and \(2,\) do not broadcast"):
        fg.masked_select(fg.ones(2, 3), fg.tensor([True, False]))
    with pytest.raises(TypeError, match=r"isnan: input must be an fg.Tensor, got list"):
        fg.isnan([1.0])
