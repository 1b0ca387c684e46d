"""Reductions over any dims: forward vs NumPy, layouts, empty dims, gradchecks, errors."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on

DIMS = [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)]


def np_logsumexp(a, axis=None, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


REDUCE = {
    "sum": (fg.sum, np.sum), "mean": (fg.mean, np.mean), "max": (fg.amax, np.max),
    "min": (fg.amin, np.min), "logsumexp": (fg.logsumexp, np_logsumexp),
    "var": (fg.var, lambda a, axis=None, keepdims=False: np.var(a, axis=axis, ddof=1, keepdims=keepdims)),
    "std": (fg.std, lambda a, axis=None, keepdims=False: np.std(a, axis=axis, ddof=1, keepdims=keepdims)),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_forward(rng, name, dim, keepdim, device):
    fn, ref = REDUCE[name]
    a = make(rng, (4, 5, 7))
    expected = ref(a, axis=dim, keepdims=keepdim)
    out = fn(on(device, fg.tensor(a, dtype=fg.float64)), dim=dim, keepdim=keepdim)
    assert out.device == device
    fg.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    fg.testing.assert_close(fn(on(device, non_contiguous(a)), dim=dim, keepdim=keepdim), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce_odd_shape_float32(rng, name, device):
    fn, ref = REDUCE[name]
    a = make(rng, (45, 65), np.float32)
    for dim in (0, 1):
        fg.testing.assert_close(fn(on(device, fg.tensor(a)), dim=dim), ref(a.astype(np.float64), axis=dim).astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_long_lines_few_outputs(rng, name, device):
    """Few long lines: the CUDA kernels combine partial results across a block here."""
    fn, ref = REDUCE[name]
    a = make(rng, (3, 5003))
    fg.testing.assert_close(fn(on(device, fg.tensor(a)), dim=1), ref(a, axis=1), rtol=1e-9, atol=1e-9)
    fg.testing.assert_close(fn(on(device, fg.tensor(a))), ref(a), rtol=1e-9, atol=1e-9)


def test_long_argmax_ties_and_nan(device):
    a = np.zeros((2, 4001))
    a[0, [17, 3000]] = 5.0                # ties: the first index wins
    a[1, [40, 2000]] = np.nan             # the first NaN wins
    t = on(device, fg.tensor(a))
    np.testing.assert_array_equal(fg.argmax(t, dim=1).cpu().numpy(), [17, 40])
    np.testing.assert_array_equal(fg.argmin(-t, dim=1).cpu().numpy(), [17, 40])
    assert np.isnan(fg.max(t, dim=1).values.cpu().numpy()[1])
    assert fg.sum(on(device, fg.tensor(np.arange(100_000, dtype=np.int64)))).item() == 4999950000


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_very_long_lines_split_across_blocks(rng, name, device):
    """Review G4: a full reduction, and few lines of at least 2**16 elements, are cut into slices
    whose partials a second kernel combines on CUDA; odd lengths leave a short last slice."""
    fn, ref = REDUCE[name]
    a = make(rng, (2, 150_001))
    fg.testing.assert_close(fn(on(device, fg.tensor(a)), dim=1), ref(a, axis=1), rtol=1e-9, atol=1e-9)
    b = make(rng, (300_007,), np.float32)
    fg.testing.assert_close(fn(on(device, fg.tensor(b))), ref(b.astype(np.float64)).astype(np.float32),
                            rtol=1e-5, atol=1e-5)


def test_split_extremes_keep_the_sequential_rule(device):
    a = np.zeros((2, 200_001))
    a[0, [70_000, 190_000, 5]] = 3.0   # ties across slices: the first index wins
    a[1, [150_000, 100_001]] = np.nan  # the first NaN wins, wherever its slice
    t = on(device, fg.tensor(a))
    np.testing.assert_array_equal(fg.argmax(t, dim=1).cpu().numpy(), [5, 100_001])
    np.testing.assert_array_equal(fg.argmin(-t, dim=1).cpu().numpy(), [5, 100_001])
    assert fg.argmax(on(device, fg.tensor(a[0]))).item() == 5
    assert np.isnan(fg.max(on(device, fg.tensor(a[1]))).item())
    ints = np.arange(-150_000, 250_001, dtype=np.int64) * 3
    assert fg.sum(on(device, fg.tensor(ints))).item() == int(ints.sum())
    np.testing.assert_array_equal(fg.sum(on(device, fg.tensor(ints.reshape(1, -1))), dim=1).cpu().numpy(),
                                  ints.reshape(1, -1).sum(axis=1))


def test_logsumexp_of_many_long_rows(rng, device):
    """Review G4: LogSumExp's maximum is found by the whole block (it was one thread per row)."""
    a = make(rng, (40, 3001), low=-30, high=30)
    a[3, 7] = np.inf
    a[5, 100] = np.nan
    got = fg.logsumexp(on(device, fg.tensor(a)), dim=1).cpu().numpy()
    rows = [i for i in range(len(a)) if i not in (3, 5)]
    np.testing.assert_allclose(got[rows], np_logsumexp(a[rows], axis=1), rtol=1e-12)
    assert got[3] == np.inf and np.isnan(got[5])


def test_sum_accumulates_float32_in_double():
    a = np.full(1_000_003, 0.1, dtype=np.float32)
    assert abs(fg.sum(fg.tensor(a)).item() - a.astype(np.float64).sum()) < 1e-2


@pytest.mark.parametrize("shape", [(3, 10_007), (1, 64), (2, 63), (1003, 37), (9, 600), (17, 1)])
def test_float32_sums_in_float_blocks_stay_near_float64(rng, shape):
    """float32 sums add small groups in float (four vectors of a line, eight rows of a column
    sum) and the groups in double: near the float64 sum, whatever the shape's remainders."""
    a = make(rng, shape, np.float32, low=-1.0, high=3.0)
    x = fg.tensor(a)
    for dim in (0, 1):
        ref = a.astype(np.float64).sum(axis=dim)
        scale = np.abs(a).astype(np.float64).sum(axis=dim)
        got = fg.sum(x, dim=dim).numpy().astype(np.float64)
        assert np.all(np.abs(got - ref) <= 1e-6 * scale + 1e-30), (shape, dim)


@pytest.mark.parametrize("shape,dims", [((64, 32, 32, 32), (0, 2, 3)), ((5, 3, 7, 2), (0, 2, 3)),
                                        ((4, 6, 5), (0, 2)), ((2, 3, 4, 5, 6), (0, 1, 3, 4)), ((1, 7, 2), (0, 2)),
                                        ((300, 2, 3), (0, 2))])
def test_sums_over_both_ends_read_in_place_on_any_thread_count(rng, shape, dims, four_threads):
    """Sum and mean over a leading and a trailing run of dims (a bias gradient over (0, 2, 3)) read
    x in place on the CPU (kernels/reduce: sum_ends_cpu): near the float64 result, float32 and
    float64, the same bits on one thread as on four, and as a non-contiguous view (moved first)."""
    a = make(rng, shape, np.float32, low=-1.0, high=3.0)
    for dtype in (np.float32, np.float64):
        x = fg.tensor(a.astype(dtype))
        for fn, ref in ((fg.sum, np.sum), (fg.mean, np.mean)):
            want = ref(a.astype(np.float64), axis=dims)
            scale = ref(np.abs(a).astype(np.float64), axis=dims)
            got = fn(x, dims).numpy()
            assert got.shape == want.shape
            assert np.all(np.abs(got - want) <= 1e-6 * scale + 1e-30), (fn.__name__, dtype)
            fg.set_num_threads(1)
            np.testing.assert_array_equal(fn(x, dims).numpy(), got)
            fg.set_num_threads(4)
            fg.testing.assert_close(fn(non_contiguous(a.astype(dtype)), dims), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "logsumexp", "var", "std"])
@pytest.mark.parametrize("dim", [None, 1, (0, 2)])
def test_reduce_gradcheck(rng, name, dim):
    fn, _ = REDUCE[name]
    a = make(rng, (3, 4, 2))
    gradcheck(lambda x: fn(x, dim=dim, keepdim=dim == 1), a)


def test_max_gradient_splits_ties():
    x = fg.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    fg.amax(x, dim=1).sum().backward()  # max(dim).values sends it to the chosen index instead
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 0.5, 0.5]])


def test_argmax_argmin(rng):
    a = make(rng, (6, 9))
    t = fg.tensor(a)
    assert fg.argmax(t).item() == np.argmax(a)
    np.testing.assert_array_equal(fg.argmax(t, dim=1).numpy(), np.argmax(a, axis=1))
    np.testing.assert_array_equal(fg.argmin(non_contiguous(a), dim=0).numpy(), np.argmin(a, axis=0))
    assert fg.argmax(t, dim=0, keepdim=True).shape == (1, 9)
    assert fg.argmax(t, keepdim=True).shape == (1, 1)
    assert fg.argmax(t).dtype == fg.int64
    ties = fg.tensor([1, 5, 5, 0])
    assert fg.argmax(ties).item() == 1  # the first maximum, like NumPy


def test_nan_propagates_like_numpy():
    a = np.array([1.0, np.nan, 3.0])
    assert np.isnan(fg.max(fg.tensor(a)).item())
    assert fg.argmax(fg.tensor(a)).item() == 1


def test_integer_and_bool_sums_follow_numpy():
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = fg.sum(fg.tensor(i), dim=0)
    assert out.dtype == fg.int64
    np.testing.assert_array_equal(out.numpy(), i.sum(0))
    assert fg.sum(fg.tensor([True, True, False])).item() == 2
    assert fg.mean(fg.tensor(i)).dtype == fg.float32  # the default float dtype, as in PyTorch
    assert fg.max(fg.tensor(i), dim=1).values.dtype == fg.int32


def test_empty_reductions():
    e = fg.zeros(0, 3)
    np.testing.assert_array_equal(fg.sum(e, dim=0).numpy(), np.zeros(3))
    assert fg.sum(e).item() == 0
    assert fg.sum(e, dim=1).shape == (0,)
    with pytest.raises(fg.InvalidArgumentError, match="max: cannot reduce over dim 0 of size 0"):
        fg.amax(e, dim=0)


def test_zero_dim_tensor_reductions():
    s = fg.tensor(3.5)
    assert fg.sum(s).item() == 3.5
    assert fg.sum(s, dim=0).item() == 3.5
    assert fg.mean(s, dim=-1, keepdim=True).shape == ()


def test_reduce_errors_name_op_and_dim():
    with pytest.raises(fg.IndexOutOfRangeError, match="sum: dim 3 is out of range for a tensor of 2"):
        fg.sum(fg.ones(2, 3), dim=3)
    with pytest.raises(fg.ShapeError, match="mean: dim -1 appears twice"):
        fg.mean(fg.ones(2, 3), dim=(1, -1))
    with pytest.raises(TypeError, match="sum: dim must be an int or a sequence of ints, got str 'a'"):
        fg.ones(3).sum(dim="a")
    with pytest.raises(TypeError, match="mean: dim must be an int, got float 1.5"):
        fg.ones(3).mean(dim=[1.5])


@pytest.mark.parametrize("device_name", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not fg.cuda.is_available(), reason="no usable GPU"))])
def test_var_with_no_degrees_of_freedom_is_nan_or_inf_like_numpy(device_name):
    # The divisor is max(0, N - correction), as NumPy and PyTorch: never a negative variance.
    cases = [(np.zeros(0), 1.0), (np.ones(3), 5.0), (np.ones(3), 3.0), (np.array([1.0, 2.0, 4.0]), 5.0),
             (np.array([1.0, 2.0, 4.0]), 2.5), (np.array([[1.0, 2.0], [3.0, 5.0]]), 2.0)]
    with np.errstate(divide="ignore", invalid="ignore"), pytest.warns(RuntimeWarning):
        for a, correction in cases:
            expected = np.var(a, ddof=correction, axis=0)
            got = fg.tensor(a, dtype=fg.float64).to(device_name).var(dim=0, correction=correction).cpu().numpy()
            np.testing.assert_array_equal(got, expected)
    assert np.isnan(fg.zeros(0).var().item()) and np.isnan(fg.ones(3).var(correction=5).item())
