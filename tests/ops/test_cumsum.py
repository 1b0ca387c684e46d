"""cumsum against NumPy (float64 running sums, rounded once), on odd shapes, every dim, strided
views, size-0, size-1 and 0-d tensors, integer/bool/half dtypes, inf and NaN; float lines longer
than a chunk (1024) bitwise against a NumPy model of the chunked order; its gradient by float64
finite differences; a compiled step; the documented errors."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck

SHAPES_DIMS = [((7,), 0), ((3, 5), 0), ((3, 5), 1), ((3, 5), -1), ((2, 3, 4), 1), ((2, 3, 4), -3),
               ((1, 9), 1), ((9, 1), 0), ((0, 3), 0), ((3, 0), 1), ((4, 0), 0), ((2, 1, 3), 1), ((), 0), ((), -1),
               ((1024,), 0), ((17, 300), 1)]
CHUNK = 1024


def reference(a, dim):
    """NumPy's running sum in float64, rounded once to a's dtype (flowgrad adds in double)."""
    if a.ndim == 0:
        return a.copy()
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf; a double sum past float32's range rounds to inf, as flowgrad's
        return np.cumsum(a.astype(np.float64), axis=dim).astype(a.dtype)


def chunked_reference(a, dim):
    """The order of float lines longer than a chunk: y[k] = carry + local, local the running sum
    within k's chunk, carry the running sum of the earlier chunks' totals, all in float64."""
    x = np.moveaxis(a.astype(np.float64), dim, -1)
    out = np.empty_like(x)
    carry = np.zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], CHUNK):
        local = np.cumsum(x[..., start:start + CHUNK], axis=-1)
        out[..., start:start + CHUNK] = carry[..., None] + local
        carry = carry + local[..., -1]
    return np.moveaxis(out, -1, dim).astype(a.dtype)


@pytest.mark.parametrize("shape, dim", SHAPES_DIMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_numpy(shape, dim, dtype, device, rng):
    a = np.asarray(rng.standard_normal(shape) * 10, dtype=dtype)
    got = fg.cumsum(fg.tensor(a, device=device), dim)
    assert got.device == device and got.dtype == fg.tensor(a).dtype and got.shape == a.shape
    np.testing.assert_array_equal(got.cpu().numpy(), reference(a, dim))
    np.testing.assert_array_equal(fg.tensor(a, device=device).cumsum(dim).cpu().numpy(), reference(a, dim))


@pytest.mark.parametrize("shape, dim", [((1025,), 0), ((5000,), 0), ((3, 2049), 1), ((2300, 3), 0), ((2, 3000, 2), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_float_lines_are_summed_in_chunks(shape, dim, dtype, device, rng):
    # Review G6: a line longer than a chunk is scanned chunk by chunk in parallel (on CUDA one
    # thread per chunk, not per line), in one order on every device, so CPU and CUDA bits agree;
    # within a chunk it is the running sum, so NumPy's in-order sum agrees to rounding.
    a = np.asarray(rng.standard_normal(shape) * 10, dtype=dtype)
    got = fg.cumsum(fg.tensor(a, device=device), dim).cpu().numpy()
    np.testing.assert_array_equal(got, chunked_reference(a, dim))
    np.testing.assert_allclose(got, reference(a, dim), rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-9)
    view = fg.tensor(np.swapaxes(a, 0, -1).copy(), device=device).transpose(0, -1)  # strided lines
    np.testing.assert_array_equal(fg.cumsum(view, dim).cpu().numpy(), got)


def test_long_line_with_inf_and_nan(device):
    a = np.ones(3000, np.float32)
    a[1500] = np.inf
    a[2500] = np.nan
    got = fg.cumsum(fg.tensor(a, device=device), 0).cpu().numpy()
    np.testing.assert_array_equal(got[:1500], np.arange(1, 1501, dtype=np.float32))
    assert np.isposinf(got[1500:2500]).all() and np.isnan(got[2500:]).all()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8, np.bool_])
def test_integers_and_bools_sum_into_int64(dtype, device, rng):
    a = rng.integers(0, 2 if dtype is np.bool_ else 100, (4, 37)).astype(dtype)
    got = fg.cumsum(fg.tensor(a, device=device), 1)
    assert got.dtype == fg.int64
    np.testing.assert_array_equal(got.cpu().numpy(), np.cumsum(a.astype(np.int64), axis=1))


def test_long_integer_lines_scan_across_a_block(device, rng):
    # Review G6: integer and bool lines of at least a block's length are scanned by a whole block
    # on CUDA, tile by tile with a carry; int64 sums are exact in any order, so the values are the
    # sequential loop's, int64 wrap-around included.
    mask = rng.random((3, 5_001)) > 0.4
    np.testing.assert_array_equal(fg.cumsum(fg.tensor(mask, device=device), 1).cpu().numpy(),
                                  np.cumsum(mask.astype(np.int64), axis=1))
    a = rng.integers(-2**31, 2**31 - 1, size=(700, 3)).astype(np.int32)  # along dim 0, inner 3
    np.testing.assert_array_equal(fg.cumsum(fg.tensor(a, device=device), 0).cpu().numpy(),
                                  np.cumsum(a.astype(np.int64), axis=0))
    big = np.full(300, 2**62, dtype=np.int64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(fg.cumsum(fg.tensor(big, device=device), 0).cpu().numpy(), np.cumsum(big))


def test_half_computes_in_float32_and_rounds_once(device, rng):
    a = rng.standard_normal((5, 64)).astype(np.float16)
    got = fg.cumsum(fg.tensor(a, device=device), 1)
    assert got.dtype == fg.float16
    expected = np.cumsum(a.astype(np.float64), axis=1).astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(got.cpu().numpy(), expected)


def test_strided_views(device, rng):
    a = rng.standard_normal((6, 8)).astype(np.float32)
    t = fg.tensor(a, device=device)
    for view, array in [(t.t(), a.T), (t[:, ::3], a[:, ::3]), (t[1:5, 2:7], a[1:5, 2:7])]:
        for dim in (0, 1):
            np.testing.assert_array_equal(fg.cumsum(view, dim).cpu().numpy(), reference(array, dim))


def test_inf_nan_and_large_values(device):
    a = np.array([[1.0, np.inf, -np.inf, 2.0], [-1e30, 1e30, np.nan, 5.0], [3e38, 3e38, -3e38, 1.0]], np.float32)
    got = fg.cumsum(fg.tensor(a, device=device), 1).cpu().numpy()
    expected = reference(a, 1)  # accumulated in double: 3e38 + 3e38 - 3e38 comes back to 3e38
    np.testing.assert_array_equal(got, expected)
    assert np.isnan(got[0, 2:]).all() and got[2, 1] == np.inf and got[2, 2] == np.float32(3e38)


@pytest.mark.parametrize("shape, dim", [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 2), 1), ((), 0)])
def test_gradient_by_finite_differences(shape, dim, rng):
    gradcheck(lambda x: fg.cumsum(x, dim), rng.standard_normal(shape))
    gradcheck(lambda x: fg.cumsum(x.t() if x.dim() == 2 else x, 0) * 2, rng.standard_normal(shape))


def test_second_order_gradient():
    x = fg.tensor([1.0, 2.0, 3.0], dtype=fg.float64, requires_grad=True)
    (g,) = fg.autograd.grad(fg.cumsum(x * x, 0).sum(), [x], create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), [6.0, 8.0, 6.0])  # 2 x (3, 2, 1)
    (h,) = fg.autograd.grad(g.sum(), [x])
    np.testing.assert_array_equal(h.numpy(), [6.0, 4.0, 2.0])


def test_compiled_step_matches_eager(rng):
    w = fg.nn.Parameter(fg.tensor(rng.standard_normal(6).astype(np.float32)))
    x = fg.tensor(rng.standard_normal((4, 6)).astype(np.float32))

    def loss(x):
        return fg.cumsum(x * w, 1).square().mean()

    step = fg.compile(loss, example_inputs=(x,))
    assert step(x).item() == loss(x).item()


def test_errors_name_cumsum_and_the_dim():
    with pytest.raises(fg.IndexOutOfRangeError, match=r"cumsum: dim 2 is out of range for a tensor of 2 "
                                                      r"dimension\(s\) \(expected -2 <= dim < 2\)"):
        fg.cumsum(fg.ones(2, 3), 2)
    with pytest.raises(fg.IndexOutOfRangeError, match=r"cumsum: dim -2 is out of range"):
        fg.cumsum(fg.tensor(1.0), -2)
    with pytest.raises(TypeError):
        fg.cumsum(fg.ones(2, 3), "a")
