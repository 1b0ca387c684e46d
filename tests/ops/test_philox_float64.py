"""Normals from shared log/cos code (kernels/common/exact_math.h): identical on the CPU and CUDA for
every dtype, within an ulp of libm in float64; float32 normals keep the values they had with libm."""
import math

import numpy as np
import pytest

import flowgrad as fg


def philox(counter, key):
    """Philox4x32-10 of uint64 counters under one key, vectorised (kernels/common/philox.h)."""
    m32 = np.uint64(0xFFFFFFFF)
    c = [counter & m32, counter >> np.uint64(32), np.zeros_like(counter), np.zeros_like(counter)]
    k0, k1 = np.uint64(key & 0xFFFFFFFF), np.uint64(key >> 32)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m32]
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m32, (k1 + np.uint64(0xBB67AE85)) & m32
    return c


def uniforms(seed, n):
    """The two 53-bit uniforms Box-Muller takes for elements 0..n-1 of a fresh stream."""
    v = philox(np.arange(n, dtype=np.uint64), seed)
    def u(a, b):
        bits = ((a << np.uint64(21)) ^ (b >> np.uint64(11))) & np.uint64((1 << 53) - 1)
        return bits.astype(np.float64) * 1.1102230246251565e-16
    return u(v[0], v[1]), u(v[2], v[3])


def ulps(a, b):
    """Distance in units in the last place between float64 arrays (NaN == NaN)."""
    def key(x):
        i = np.asarray(x, dtype=np.float64).view(np.int64).astype(object)
        return np.where(i < 0, -(i & 0x7FFFFFFFFFFFFFFF), i)
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.abs(key(a) - key(b))).astype(np.int64)


def test_float32_randn_keeps_its_values():
    fg.manual_seed(1234)
    got = fg.randn(6).numpy()
    assert got.view(np.uint32).tolist() == [3176251320, 1068527195, 1046654450, 3216987587, 1053386290, 3206075819]
    fg.manual_seed(77)
    got = fg.randn(20_000).numpy()
    u1, u2 = uniforms(77, got.size)
    libm = [math.sqrt(-2.0 * math.log(1.0 - a)) * math.cos(6.283185307179586 * b) for a, b in zip(u1, u2)]
    np.testing.assert_array_equal(got, np.array(libm, dtype=np.float32))


def test_float32_randn_is_box_muller_over_the_shared_math_rounded():
    fg.manual_seed(8)
    got = fg.randn(150_001).numpy()
    u1, u2 = uniforms(8, got.size)
    radius = np.sqrt(-2.0 * fg._core._exact_math("log", 1.0 - u1))
    np.testing.assert_array_equal(got, (radius * fg._core._exact_math("cos", 6.283185307179586 * u2)).astype(np.float32))


def test_float64_randn_is_box_muller_over_the_shared_math():
    fg.manual_seed(5)
    got = fg.randn(3, 50_001, dtype=fg.float64).numpy().ravel()
    u1, u2 = uniforms(5, got.size)
    radius = np.sqrt(-2.0 * fg._core._exact_math("log", 1.0 - u1))
    expected = radius * fg._core._exact_math("cos", 6.283185307179586 * u2)
    np.testing.assert_array_equal(got, expected)
    libm = np.array([math.sqrt(-2.0 * math.log(1.0 - a)) * math.cos(6.283185307179586 * b)
                     for a, b in zip(u1[:20_000], u2[:20_000])])
    assert ulps(got[:20_000], libm).max() <= 4


def test_float64_normal_fill_matches_randn(device):
    fg.manual_seed(9)
    x = fg.empty(1001, dtype=fg.float64, device=device)
    x.normal_()
    fg.manual_seed(9)
    np.testing.assert_array_equal(x.cpu().numpy(), fg.randn(1001, dtype=fg.float64).numpy())


def test_float64_randn_is_the_same_on_every_device(device):
    fg.manual_seed(3)
    here = fg.randn(1000, 257, dtype=fg.float64, device=device).cpu().numpy()
    fg.manual_seed(3)
    np.testing.assert_array_equal(here, fg.randn(1000, 257, dtype=fg.float64).numpy())


def libm(fn, x):
    return np.array([getattr(math, fn)(v) for v in x])


def test_exact_log_is_within_an_ulp_of_libm():
    rng = np.random.default_rng(0)
    box_muller = 1.0 - (rng.integers(0, 1 << 53, 600_000, dtype=np.int64) * 1.1102230246251565e-16)
    wide = np.ldexp(rng.uniform(1.0, 2.0, 600_000), rng.integers(-1074, 1024, 600_000))
    near_one = 1.0 + rng.uniform(-1e-6, 1e-6, 100_000)
    x = np.concatenate([box_muller, wide[np.isfinite(wide) & (wide > 0)], near_one])
    assert ulps(fg._core._exact_math("log", x), libm("log", x)).max() <= 1


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_exact_sincos_is_within_an_ulp_of_libm(fn):
    rng = np.random.default_rng(1)
    turn = 6.283185307179586 * rng.uniform(0.0, 1.0, 600_000)
    wide = rng.uniform(-1e5, 1e5, 400_000)
    tiny = np.ldexp(rng.uniform(-1.0, 1.0, 20_000), rng.integers(-1074, -20, 20_000))
    near_multiples = np.nextafter(np.arange(1, 2000) * (math.pi / 2), np.inf)
    x = np.concatenate([turn, wide, tiny, near_multiples, -near_multiples])
    assert ulps(fg._core._exact_math(fn, x), libm(fn, x)).max() <= 1


def test_exact_math_special_values():
    inf, nan = math.inf, math.nan
    log = fg._core._exact_math("log", [0.0, -0.0, -1.0, -inf, inf, nan, 1.0, 5e-324, 1.7976931348623157e308, 2.0])
    assert log[0] == -inf and log[1] == -inf and np.isnan(log[2:4]).all() and log[4] == inf and np.isnan(log[5])
    assert log[6] == 0.0 and not math.copysign(1.0, log[6]) < 0
    np.testing.assert_array_equal(log[7:], [math.log(5e-324), math.log(1.7976931348623157e308), math.log(2.0)])
    x = [0.0, -0.0, inf, -inf, nan, 1e-300]
    sin, cos = fg._core._exact_math("sin", x), fg._core._exact_math("cos", x)
    assert sin[0] == 0.0 and math.copysign(1.0, sin[1]) == -1.0 and sin[5] == 1e-300
    assert np.isnan(sin[2:5]).all() and np.isnan(cos[2:5]).all()
    assert cos[0] == 1.0 and cos[1] == 1.0 and cos[5] == 1.0
    with pytest.raises(ValueError, match="fn must be"):
        fg._core._exact_math("tan", [1.0])
