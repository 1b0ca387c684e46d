"""Creation ops: full (zeros/ones), arange, linspace, eye, rand, randn, randint, and the *_like forms."""
import numpy as np
import pytest

import flowgrad as fg


def test_full_zeros_ones_empty():
    assert fg.zeros(2, 3).dtype == fg.float32
    np.testing.assert_array_equal(fg.zeros((2, 3)).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(fg.ones(4, dtype=fg.int32).numpy(), np.ones(4, np.int32))
    np.testing.assert_array_equal(fg.full((2, 2), 7).numpy(), np.full((2, 2), 7))
    assert fg.full((2,), 7).dtype == fg.int64
    assert fg.full((2,), 1.5).dtype == fg.float32
    assert fg.full((2,), True).dtype == fg.bool
    assert fg.empty(3, 0).shape == (3, 0)
    assert fg.zeros(()).shape == ()
    t = fg.zeros(3, requires_grad=True)
    assert t.requires_grad and t.is_leaf
    with pytest.raises(fg.ShapeError, match="zeros: negative dimension -1"):
        fg.zeros(2, -1)
    with pytest.raises(fg.ShapeError, match="ones: negative dimension -1"):
        fg.ones(-1)
    with pytest.raises(TypeError, match="zeros: shape must be an int, got str 'a'"):
        fg.zeros(2, "a")
    with pytest.raises(TypeError, match="full: fill_value must be a number, got str 'x'"):
        fg.full((2,), "x")
    with pytest.raises(OverflowError, match="zeros: shape = int 18446744073709551616 does not fit in 64 bits"):
        fg.zeros(2**64)


def test_like_constructors():
    base = fg.ones(2, 3, dtype=fg.float64)
    for fn in (fg.zeros_like, fg.ones_like, fg.rand_like, fg.randn_like):
        out = fn(base)
        assert out.shape == (2, 3) and out.dtype == fg.float64
    np.testing.assert_array_equal(fg.full_like(base, 4).numpy(), np.full((2, 3), 4.0))
    assert fg.zeros_like(base, dtype=fg.int32).dtype == fg.int32


@pytest.mark.parametrize("fn", ["zeros_like", "ones_like", "full_like", "rand_like", "randn_like"])
@pytest.mark.parametrize("bad", [None, 2**31, "", [1.0, 2.0]], ids=["None", "int", "str", "list"])
def test_like_constructors_reject_non_tensors(fn, bad):
    args = (bad, 1) if fn == "full_like" else (bad,)
    with pytest.raises(TypeError, match=f"{fn}: argument 't' must be an fg.Tensor, got {type(bad).__name__}"):
        getattr(fg, fn)(*args)


@pytest.mark.parametrize("args", [(5,), (2, 9), (1, 2, 0.25), (10, 0, -3), (0.5, 2.5, 0.5), (3, 3)])
def test_arange(args):
    out = fg.arange(*args)
    ref = np.arange(*args)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    assert out.dtype == (fg.int64 if ref.dtype.kind == "i" else fg.float32)
    with pytest.raises(fg.InvalidArgumentError, match="arange: .* step non-zero"):
        fg.arange(0, 5, 0)


def test_float64_ranges_are_the_same_bits_on_every_device(device):
    # Review G7: element i is start + i * step with the product rounded before the sum on every
    # device (nvcc fused it into an FMA: arange(1, 101, 0.1)[7] was 1.7 on CUDA, 1.7000000000000002
    # on the CPU). NumPy's arange steps by (start + step) - start, so it is only close.
    cases = [(fg.arange, (1.0, 101.0, 0.1), np.arange), (fg.arange, (-3.7, 250.0, 0.37), np.arange),
             (fg.linspace, (0.1, 97.3, 3001), np.linspace), (fg.linspace, (1e-3, 1e3, 1000), np.linspace)]
    for make, args, ref in cases:
        here = make(*args, dtype=fg.float64, device=device).cpu().numpy()
        np.testing.assert_array_equal(here, make(*args, dtype=fg.float64).numpy())
        np.testing.assert_allclose(here, ref(*args), rtol=1e-15, atol=1e-13)
    assert fg.arange(1.0, 101.0, 0.1, dtype=fg.float64, device=device)[7].item() == 1.0 + 7 * 0.1 == 1.7000000000000002


def test_linspace_and_eye():
    np.testing.assert_allclose(fg.linspace(-1, 2, 7, dtype=fg.float64).numpy(), np.linspace(-1, 2, 7))
    assert fg.linspace(0, 1, 0).shape == (0,)
    np.testing.assert_array_equal(fg.linspace(3, 5, 1).numpy(), [3.0])
    np.testing.assert_array_equal(fg.eye(3).numpy(), np.eye(3))
    np.testing.assert_array_equal(fg.eye(2, 4, dtype=fg.int64).numpy(), np.eye(2, 4, dtype=np.int64))


def test_random_is_reproducible_and_distributed():
    fg.manual_seed(11)
    a = fg.rand(1000, 100)
    b = fg.randn(200_000, dtype=fg.float64)
    fg.manual_seed(11)
    np.testing.assert_array_equal(fg.rand(1000, 100).numpy(), a.numpy())
    np.testing.assert_array_equal(fg.randn(200_000, dtype=fg.float64).numpy(), b.numpy())
    u = a.numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    n = b.numpy()
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1) < 0.01
    assert not np.array_equal(fg.rand(10).numpy(), fg.rand(10).numpy())  # the stream advances


def test_rng_state_round_trip():
    fg.manual_seed(5)
    state = fg.get_rng_state()
    first = fg.randn(8).numpy()
    fg.set_rng_state(state)
    np.testing.assert_array_equal(fg.randn(8).numpy(), first)


def test_randint():
    fg.manual_seed(0)
    r = fg.randint(-3, 4, (10000,))
    assert r.dtype == fg.int64
    v = r.numpy()
    assert v.min() == -3 and v.max() == 3
    assert set(np.unique(fg.randint(5, size=(100,)).numpy())) <= set(range(5))
    with pytest.raises(fg.InvalidArgumentError, match="randint: low \\(3\\) must be less than high \\(3\\)"):
        fg.randint(3, 3, (2,))
    with pytest.raises(fg.DTypeError, match="rand: dtype must be floating"):
        fg.rand(2, dtype=fg.int32)


def test_huge_allocation_raises_memory_error():
    with pytest.raises(MemoryError, match="cpu: cannot allocate"):
        fg.empty(10**7, 10**7)
    with pytest.raises(fg.OutOfMemoryError, match="zeros: shape .* has more elements than fit in 64 bits"):
        fg.zeros(2**40, 2**40)
    with pytest.raises(fg.OutOfMemoryError, match=r"zeros: cannot allocate \(4611686018427387904,\) of float32"):
        fg.zeros(2**62)


@pytest.mark.parametrize("dtype", [fg.float32, fg.float16, fg.int64, fg.bool])
def test_full_on_device(dtype, device):
    t = fg.full((3, 5), 1.5, dtype=dtype, device=device)
    assert t.device == device and t.dtype == dtype
    np.testing.assert_array_equal(t.cpu().numpy(), fg.full((3, 5), 1.5, dtype=dtype).numpy())
    assert fg.zeros(0, 4, device=device).cpu().shape == (0, 4)


@pytest.mark.parametrize("make_random", [
    lambda d: fg.rand(1001, 3, device=d), lambda d: fg.randn(7, 129, dtype=fg.float64, device=d),
    lambda d: fg.randint(-5, 9, (513,), device=d), lambda d: fg.rand(64, dtype=fg.float16, device=d),
    lambda d: fg.randn(1000, 1001, device=d), lambda d: fg.randn(333, dtype=fg.bfloat16, device=d).float(),
    lambda d: fg.rand(257, dtype=fg.float64, device=d)])
def test_same_seed_same_values_on_every_device(make_random, device):
    fg.manual_seed(11)
    here = make_random(device)
    fg.manual_seed(11)
    reference = make_random("cpu")
    assert here.device == device
    np.testing.assert_array_equal(here.cpu().numpy(), reference.numpy())
