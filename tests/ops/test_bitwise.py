"""bitwise_and/or/xor/not and logical_and/or/xor/not, and the operators & | ^ ~, against NumPy."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import ODD_SHAPES, make, on

BINARY = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}
DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64]


def strided(a):
    """A tensor with a's values and every other element skipped in memory (stride 2)."""
    return fg.tensor(np.stack([a, a], axis=-1))[..., 0]


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("npdt", DTYPES)
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_bitwise_binary_matches_numpy(rng, device, name, npdt, shape):
    lo, hi = (0, 256) if npdt == np.uint8 else (-100, 100)
    a, b = make(rng, shape, npdt, lo, hi), make(rng, shape, npdt, lo, hi)
    out = getattr(fg, name)(on(device, fg.tensor(a)), on(device, strided(b)))
    assert out.dtype == fg.tensor(a).dtype
    np.testing.assert_array_equal(out.cpu().numpy(), BINARY[name](a, b))


@pytest.mark.parametrize("npdt", DTYPES)
def test_operators_and_broadcasting(rng, device, npdt):
    a, b = make(rng, (4, 1, 3), npdt, 0, 100), make(rng, (5, 1), npdt, 0, 100)
    ta, tb = on(device, fg.tensor(a)), on(device, fg.tensor(b))
    for got, want in ((ta & tb, a & b), (ta | tb, a | b), (ta ^ tb, a ^ b), (~ta, ~a), (fg.bitwise_not(ta), ~a)):
        np.testing.assert_array_equal(got.cpu().numpy(), want)
        assert got.dtype == fg.tensor(want).dtype
    s = True if npdt == np.bool_ else 6
    np.testing.assert_array_equal((ta & s).cpu().numpy(), a & s)  # Python scalars are weak
    np.testing.assert_array_equal((s | ta).cpu().numpy(), s | a)
    np.testing.assert_array_equal(ta.bitwise_xor(tb).cpu().numpy(), a ^ b)


def test_masks_combine_with_operators(rng):
    a = make(rng, (6, 7))
    t = fg.tensor(a)
    mask = (t > 0) & ~(t > 1) | (t < -1.5)
    np.testing.assert_array_equal(mask.numpy(), (a > 0) & ~(a > 1) | (a < -1.5))
    assert mask.dtype == fg.bool
    np.testing.assert_array_equal(((t > 0) ^ (t < 1)).numpy(), (a > 0) ^ (a < 1))
    np.testing.assert_array_equal((fg.tensor([1, 2], dtype=fg.int32) & fg.tensor([3, 3])).numpy(), [1, 2])  # promotes


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical_ops_match_numpy(rng, device, name):
    a, b = make(rng, (5, 6), np.float64, -1, 1).round(), make(rng, (6,), np.int64, -1, 2)
    out = getattr(fg, name)(on(device, fg.tensor(a)), on(device, fg.tensor(b)))
    assert out.dtype == fg.bool
    np.testing.assert_array_equal(out.cpu().numpy(), getattr(np, name)(a, b))
    np.testing.assert_array_equal(fg.logical_not(on(device, fg.tensor(a))).cpu().numpy(), np.logical_not(a))
    np.testing.assert_array_equal(on(device, fg.tensor(b)).logical_not().cpu().numpy(), np.logical_not(b))


def test_bitwise_ops_on_floats_raise_naming_the_op():
    f, i = fg.ones(3), fg.ones(3, dtype=fg.int32)
    with pytest.raises(fg.DTypeError, match=r"bitwise_and: expected bool or integer tensors, got .*float32"):
        f & i
    with pytest.raises(TypeError, match="bitwise_or: expected bool or integer tensors"):
        i | 1.5
    with pytest.raises(fg.DTypeError, match="bitwise_xor"):
        fg.bitwise_xor(f, f)
    with pytest.raises(fg.DTypeError, match=r"bitwise_not: expected a bool or integer tensor, got .*float64"):
        ~fg.ones(2, dtype=fg.float64)


def test_bitwise_ops_are_not_differentiable():
    x = fg.ones(3, requires_grad=True)
    assert not ((x > 0) & (x < 2)).requires_grad
