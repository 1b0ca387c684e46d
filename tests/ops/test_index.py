"""gather, scatter_add, index_select, masked_fill, one_hot, nonzero, sort/topk/argsort."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make


def f64(a):
    return fg.tensor(a, dtype=fg.float64)


def test_gather_matches_take_along_axis(rng):
    a = make(rng, (4, 5, 3))
    for dim in range(3):
        shape = list(a.shape)
        shape[dim] = 7
        idx = rng.integers(-a.shape[dim], a.shape[dim], size=shape)
        fg.testing.assert_close(fg.gather(f64(a), dim, fg.tensor(idx)), np.take_along_axis(a, idx % a.shape[dim], axis=dim))
    idx = rng.integers(0, 5, size=(4, 2, 3))
    gradcheck(lambda x: fg.gather(x, 1, fg.tensor(idx)) ** 2, a)


def test_scatter_add_accumulates_duplicates(rng):
    x = np.zeros((3, 4))
    idx = np.array([[0, 1, 1, 3], [2, 2, 2, 2], [0, 0, 0, 0]])
    src = make(rng, (3, 4))
    expected = x.copy()
    for i in range(3):
        for j in range(4):
            expected[i, idx[i, j]] += src[i, j]
    fg.testing.assert_close(fg.scatter_add(f64(x), 1, fg.tensor(idx), f64(src)), expected)
    gradcheck(lambda base, s: fg.scatter_add(base, 1, fg.tensor(idx), s) * 2, x, src)
    with pytest.raises(fg.ShapeError, match="scatter_add: src \\(2, 4\\) must have the index's shape"):
        fg.scatter_add(f64(x), 1, fg.tensor(idx), fg.ones(2, 4, dtype=fg.float64))


def test_index_select(rng):
    a = make(rng, (5, 6))
    idx = np.array([4, 0, 0, 2])
    fg.testing.assert_close(fg.index_select(f64(a), 0, fg.tensor(idx)), a[idx])
    fg.testing.assert_close(f64(a).index_select(1, fg.tensor(idx.astype(np.int32))), a[:, idx])
    gradcheck(lambda x: fg.index_select(x, 0, fg.tensor(idx)) * 3, a)
    with pytest.raises(fg.ShapeError, match="index_select: index must be 1-D"):
        fg.index_select(f64(a), 0, fg.tensor([[1]]))
    with pytest.raises(fg.DTypeError, match="index must be int32 or int64, got float32"):
        fg.index_select(f64(a), 0, fg.tensor([1.0]))


def test_index_out_of_range_raises_never_crashes():
    with pytest.raises(fg.IndexOutOfRangeError, match="gather: index 3 is out of range for dimension 1 of size 3"):
        fg.gather(fg.ones(2, 3), 1, fg.tensor([[0, 3], [1, 1]]))
    with pytest.raises(fg.IndexOutOfRangeError, match="index -9 is out of range"):
        fg.index_select(fg.ones(4), 0, fg.tensor([-9]))


def test_masked_fill(rng):
    a = make(rng, (3, 4))
    m = a > 0
    fg.testing.assert_close(f64(a).masked_fill(fg.tensor(m), -5.0), np.where(m, -5.0, a))
    gradcheck(lambda x: fg.masked_fill(x, fg.tensor(m[0]), 0.0) * 2, a)
    with pytest.raises(fg.DTypeError, match="masked_fill: mask must be bool"):
        f64(a).masked_fill(fg.ones(3, 4), 0.0)


def test_one_hot():
    idx = np.array([[0, 2], [1, 1]])
    out = fg.one_hot(fg.tensor(idx), 3)
    assert out.dtype == fg.int64
    np.testing.assert_array_equal(out.numpy(), np.eye(3, dtype=np.int64)[idx])
    with pytest.raises(fg.IndexOutOfRangeError, match="one_hot: index 3 is out of range"):
        fg.one_hot(fg.tensor([3]), 3)
    with pytest.raises(fg.InvalidArgumentError, match="num_classes must be positive"):
        fg.one_hot(fg.tensor([0]), 0)


def test_nonzero(rng):
    m = make(rng, (3, 4, 2), np.bool_)
    np.testing.assert_array_equal(fg.nonzero(fg.tensor(m)).numpy(), np.argwhere(m))
    assert fg.nonzero(fg.zeros(3, dtype=fg.bool)).shape == (0, 1)


def test_sort_argsort_topk(rng):
    a = make(rng, (6, 7))
    a[0, :3] = 0.25  # ties: sorting is stable
    for dim in (0, 1):
        v, i = fg.sort(f64(a), dim=dim)
        np.testing.assert_array_equal(i.numpy(), np.argsort(a, axis=dim, kind="stable"))
        fg.testing.assert_close(v, np.sort(a, axis=dim))
        np.testing.assert_array_equal(f64(a).argsort(dim=dim).numpy(), np.argsort(a, axis=dim, kind="stable"))
    v, i = f64(a).sort(descending=True)
    np.testing.assert_array_equal(v.numpy(), -np.sort(-a, axis=1))
    v, i = fg.topk(f64(a), 3)
    fg.testing.assert_close(v, -np.sort(-a, axis=1)[:, :3])
    np.testing.assert_array_equal(np.take_along_axis(a, i.numpy(), 1), v.numpy())
    v, _ = fg.topk(f64(a), 2, dim=0, largest=False)
    fg.testing.assert_close(v, np.sort(a, axis=0)[:2])
    nan = fg.sort(fg.tensor([3.0, np.nan, 1.0]))[0].numpy()
    assert nan[0] == 1.0 and np.isnan(nan[2])
    gradcheck(lambda x: fg.topk(x, 2)[0] * fg.sort(x, dim=0)[0][:, :2], make(rng, (4, 5)))
    with pytest.raises(fg.IndexOutOfRangeError, match="topk: k = 8 is out of range for dim 1 of size 7"):
        fg.topk(f64(a), 8)


def test_gather_scatter_add_index_select_on_device(device):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 5, 4))
    idx = rng.integers(-5, 5, size=(3, 7, 4))
    t, ti = fg.tensor(x), fg.tensor(idx)
    here = fg.gather(t.to(device), 1, ti.to(device))
    np.testing.assert_array_equal(here.cpu().numpy(), fg.gather(t, 1, ti).numpy())
    src = fg.tensor(rng.normal(size=(3, 7, 4)))
    summed = fg.scatter_add(fg.zeros(3, 5, 4, dtype=fg.float64).to(device), 1, ti.to(device), src.to(device))
    np.testing.assert_allclose(summed.cpu().numpy(), fg.scatter_add(fg.zeros(3, 5, 4, dtype=fg.float64), 1, ti, src).numpy(),
                               rtol=1e-12, atol=1e-12)
    rows = fg.tensor([4, 0, -1, 2])
    np.testing.assert_array_equal(fg.index_select(t.to(device), 1, rows.to(device)).cpu().numpy(),
                                  fg.index_select(t, 1, rows).numpy())
    with pytest.raises(fg.IndexOutOfRangeError, match="gather: index 5 is out of range for dimension 1 of size 5"):
        fg.gather(t.to(device), 1, fg.tensor(np.full((3, 1, 4), 5)).to(device)).cpu()  # cuda: raised at the sync
