"""Ops that gained CUDA kernels (creation ranges, one_hot, sort/topk, nonzero, im2col/col2im and
so conv2d and the pools), checked on every device against NumPy and the CPU kernels."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import make, non_contiguous, on

F = fg.nn.functional


def test_arange_linspace_eye(device):
    np.testing.assert_array_equal(fg.arange(2, 17, 3, device=device).cpu().numpy(), np.arange(2, 17, 3))
    np.testing.assert_allclose(fg.arange(0.5, 2.0, 0.25, dtype=fg.float64, device=device).cpu().numpy(),
                               np.arange(0.5, 2.0, 0.25))
    assert fg.arange(0, device=device).shape == (0,)
    for n in (0, 1, 2, 7, 50):
        got = fg.linspace(-1.5, 3.0, n, dtype=fg.float64, device=device).cpu().numpy()
        np.testing.assert_allclose(got, np.linspace(-1.5, 3.0, n), rtol=1e-15, atol=1e-15)
        np.testing.assert_array_equal(got, fg.linspace(-1.5, 3.0, n, dtype=fg.float64).numpy())  # one formula
    for rows, cols in ((3, 3), (2, 5), (4, 1), (0, 2)):
        np.testing.assert_array_equal(fg.eye(rows, cols, device=device).cpu().numpy(), np.eye(rows, cols))
    np.testing.assert_array_equal(fg.eye(3, dtype=fg.bfloat16, device=device).cpu().float().numpy(), np.eye(3))


def test_one_hot(rng, device):
    idx = rng.integers(-4, 4, size=(3, 5))
    got = fg.one_hot(fg.tensor(idx).to(device), 4).cpu().numpy()
    np.testing.assert_array_equal(got, np.eye(4, dtype=np.int64)[idx % 4])
    assert fg.one_hot(fg.zeros(0, dtype=fg.int64).to(device), 3).shape == (0, 3)
    with pytest.raises(fg.IndexOutOfRangeError, match="one_hot: index 4 is out of range for dimension 2 of size 4"):
        fg.one_hot(fg.tensor([[4]]).to(device), 4).cpu()  # cuda: raised at the sync


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int16, np.uint8])
def test_sort_and_topk_match_the_stable_cpu_order(rng, device, dtype):
    a = make(rng, (5, 9, 4), dtype, -4, 4)  # small integer ranges: many ties
    for dim in (0, 1, 2, -1):
        for descending in (False, True):
            v, i = fg.sort(fg.tensor(a).to(device), dim=dim, descending=descending)
            order = np.argsort(-a if descending and dtype != np.uint8 else a, axis=dim, kind="stable")
            if descending and dtype == np.uint8:
                order = np.argsort(255 - a, axis=dim, kind="stable")
            np.testing.assert_array_equal(i.cpu().numpy(), order)
            np.testing.assert_array_equal(v.cpu().numpy(), np.take_along_axis(a, order, dim))
    v, i = fg.topk(fg.tensor(a).to(device), 3, dim=1)
    ref_v, ref_i = fg.topk(fg.tensor(a), 3, dim=1)
    np.testing.assert_array_equal(v.cpu().numpy(), ref_v.numpy())
    np.testing.assert_array_equal(i.cpu().numpy(), ref_i.numpy())


def test_sort_special_values_and_layouts(device):
    x = np.array([[3.0, np.nan, -0.0, 1.0, 0.0, -np.inf, np.inf, np.nan, -2.0]])
    for descending in (False, True):
        v, i = fg.sort(fg.tensor(x).to(device), descending=descending)
        rv, ri = fg.sort(fg.tensor(x), descending=descending)
        np.testing.assert_array_equal(i.cpu().numpy(), ri.numpy())
        np.testing.assert_array_equal(np.signbit(v.cpu().numpy()), np.signbit(rv.numpy()))
    b = make(np.random.default_rng(3), (6, 7))
    v, i = fg.sort(on(device, non_contiguous(b)), dim=0)
    np.testing.assert_array_equal(i.cpu().numpy(), np.argsort(b, axis=0, kind="stable"))
    empty = fg.sort(fg.zeros(3, 0).to(device), dim=1)
    assert empty[0].shape == (3, 0) and empty[1].shape == (3, 0)
    assert fg.topk(fg.ones(4).to(device), 0)[0].shape == (0,)
    long_row = np.random.default_rng(5).normal(size=(2, 5000))
    v, i = fg.topk(fg.tensor(long_row).to(device), 7)
    np.testing.assert_array_equal(i.cpu().numpy(), np.argsort(-long_row, axis=1, kind="stable")[:, :7])
    with pytest.raises(fg.DTypeError, match="sort: not defined for bool tensors"):
        fg.sort(fg.ones(3, dtype=fg.bool).to(device))


def test_nonzero(rng, device):
    for shape in ((3, 4, 2), (7,), (1, 1), (0, 5), ()):
        m = make(rng, shape, np.bool_)
        np.testing.assert_array_equal(fg.nonzero(fg.tensor(m).to(device)).cpu().numpy(), np.argwhere(m))
    big = rng.random(100_000) > 0.7
    np.testing.assert_array_equal(fg.nonzero(fg.tensor(big).to(device)).cpu().numpy(), np.argwhere(big))
    with pytest.raises(fg.DTypeError, match="nonzero: expected a bool mask"):
        fg.nonzero(fg.ones(3).to(device))


def test_conv2d_and_pools_forward_backward_on_device(rng, device):
    x = make(rng, (2, 3, 9, 7))
    w = make(rng, (4, 3, 3, 2))
    b = make(rng, (4,))
    for stride, padding in ((1, 0), (2, 1), (3, 2)):
        grads = []
        for dev in ("cpu", device):
            tensors = [fg.tensor(a, requires_grad=True) for a in (x, w, b)]
            y = F.conv2d(*[t.to(dev) for t in tensors], stride=stride, padding=padding)
            (y * y).sum().backward()
            grads.append([y.cpu().numpy()] + [t.grad.numpy() for t in tensors])
        for here, ref in zip(*grads):
            np.testing.assert_allclose(here, ref, rtol=1e-12, atol=1e-12)
    for pool in (F.max_pool2d, F.avg_pool2d):
        for k, stride in ((2, 2), (3, 1), (3, 2)):
            outs = []
            for dev in ("cpu", device):
                t = fg.tensor(x, requires_grad=True)
                y = pool(t.to(dev), k, stride)
                (y * y).sum().backward()
                outs.append((y.cpu().numpy(), t.grad.numpy()))
            np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-12)
            np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-12)


def test_im2col_col2im_unfold_fold(rng, device):
    """unfold is im2col and fold col2im: the device matches the CPU bit for bit (same sum order)."""
    x = make(rng, (2, 3, 7, 6))
    for kernel, padding, stride in (((3, 2), 1, 2), ((1, 1), 0, 1), ((7, 6), 0, 1), ((2, 3), 2, 3)):
        cols = F.unfold(fg.tensor(x).to(device), kernel, padding, stride)
        ref = F.unfold(fg.tensor(x), kernel, padding, stride)
        np.testing.assert_array_equal(cols.cpu().numpy(), ref.numpy())
        c = make(rng, tuple(ref.shape))
        back = F.fold(fg.tensor(c).to(device), (7, 6), kernel, padding, stride)
        np.testing.assert_array_equal(back.cpu().numpy(), F.fold(fg.tensor(c), (7, 6), kernel, padding, stride).numpy())
    assert F.unfold(fg.zeros(0, 2, 4, 4).to(device), (2, 2)).shape == (0, 8, 9)
