"""Fused attention under large negative scores (issue 18, F3): additive padding masks of -1e4,
-1e9, finfo(float32).min and -inf over whole leading key tiles, left padding per batch row and an
ALiBi-like bias on long rows. The online softmax must stay finite where the composite does, in the
forward and the backward pass, for every storage dtype the device takes."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import make, on
from tests.ops.test_attention_fused import numpy_attention

F = fg.nn.functional

# (dtype, tolerance against the float64 reference on the same rounded values)
DTYPES = [(fg.float32, 2e-5), (fg.bfloat16, 2e-2), (fg.float16, 2e-3)]
BIG_NEGATIVES = [-1e4, -1e9, float(np.finfo(np.float32).min), -np.inf]
S = 200


def masked_keys(case):
    """Boolean (S,): the keys a case masks."""
    keys = np.zeros(S, dtype=bool)
    if case == "first 64":
        keys[:64] = True
    elif case == "first 128":
        keys[:128] = True
    else:  # all but one, which sits in the third key tile
        keys[:] = True
        keys[130] = False
    return keys


def attend_and_compare(device, dtype, tol, arrays, mask, causal=False):
    """Runs the fused op on `arrays` (q, k, v) and the additive `mask` rounded to `dtype`, and checks
    its output and gradients against float64 NumPy and the float64 composite on the same values."""
    lo = [on(device, fg.tensor(a).to(dtype)) for a in arrays]
    for t in lo:
        t.requires_grad = True
    tm = on(device, fg.tensor(mask).to(dtype))
    with fg._core.plan.OpLog() as log:
        out = F.scaled_dot_product_attention(*lo, attn_mask=tm, is_causal=causal)
    assert "flash_attention" in log.ops  # the fused op (on the CPU a half call widens into casts around it)
    wide = [fg.tensor(t.float().cpu().numpy().astype(np.float64), requires_grad=True) for t in lo]
    wide_mask = fg.tensor(tm.float().cpu().numpy().astype(np.float64))
    got = out.float().cpu().numpy()
    assert np.isfinite(got).all()
    expected = numpy_attention(*(w.detach().numpy() for w in wide), wide_mask.numpy(), causal)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    g = make(np.random.default_rng(7), out.shape)
    grads = fg.autograd.grad((out.float() * on(device, fg.tensor(g, dtype=fg.float32))).sum(), lo)
    ref = F.scaled_dot_product_attention_reference(*wide, attn_mask=wide_mask, is_causal=causal)
    want = fg.autograd.grad((ref * fg.tensor(g)).sum(), wide)
    for a, b in zip(grads, want):
        assert np.isfinite(a.float().cpu().numpy()).all()
        np.testing.assert_allclose(a.float().cpu().numpy(), b.numpy(), rtol=4 * tol, atol=4 * tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("value", BIG_NEGATIVES)
@pytest.mark.parametrize("case", ["first 64", "first 128", "all but one"])
def test_large_negative_padding_over_leading_key_tiles(rng, device, dtype, tol, value, case):
    q, k, v = (make(rng, shape, low=-1, high=1) for shape in ((2, 5, 32), (2, S, 32), (2, S, 32)))
    mask = np.where(masked_keys(case), value, 0.0)[None, :].repeat(5, axis=0)  # (L, S)
    attend_and_compare(device, dtype, tol, (q, k, v), mask)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("value", [-1e4, float(np.finfo(np.float32).min)])
def test_left_padding_per_batch_row(rng, device, dtype, tol, value):
    """A (B, 1, 1, S) key padding mask, broadcast over heads and queries, with a different number of
    leading pad keys per batch row (none, one tile and a bit, all but one)."""
    pads = [0, 70, 129, S - 1]
    q, k, v = (make(rng, shape, low=-1, high=1) for shape in ((4, 2, 3, 16), (4, 2, S, 16), (4, 2, S, 16)))
    mask = np.zeros((4, 1, 1, S))
    for b, pad in enumerate(pads):
        mask[b, ..., :pad] = value
    attend_and_compare(device, dtype, tol, (q, k, v), mask)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_alibi_bias_on_a_long_causal_row(rng, device, dtype, tol):
    """bias -0.5 (i - j): past query ~240 a row's whole first key tile scores below -88."""
    L = 300
    q, k, v = (make(rng, (1, L, 16), low=-1, high=1) for _ in range(3))
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    attend_and_compare(device, dtype, tol, (q, k, v), -0.5 * np.abs(i - j), causal=True)


def test_float64_keeps_scores_far_below_the_float32_range(rng):
    """float64 on the CPU: a -1e300 mask over the first tile, where exp(-base) overflows in any type."""
    q, k, v = (make(rng, shape, low=-1, high=1) for shape in ((1, 4, 8), (1, 130, 8), (1, 130, 8)))
    mask = np.zeros((4, 130))
    mask[:, :64] = -1e300
    tq, tk, tv, tm = (fg.tensor(a) for a in (q, k, v, mask))
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
    np.testing.assert_allclose(out.numpy(), numpy_attention(q, k, v, mask), rtol=1e-10, atol=1e-12)


def fully_masked_row(device, value, dtype):
    """q, k, v and an additive mask that masks every key of query row 1 by `value`."""
    rng = np.random.default_rng(8)
    q, k, v = (on(device, fg.tensor(make(rng, s, low=-1, high=1), dtype=dtype, requires_grad=True))
               for s in ((3, 8), (100, 8), (100, 8)))
    mask = np.zeros((3, 100))
    mask[1] = value
    return q, k, v, on(device, fg.tensor(mask, dtype=dtype))


@pytest.mark.parametrize("value", [-1e4, -1e9, float(np.finfo(np.float32).min)])
def test_row_masked_entirely_by_a_finite_value_matches_the_composite(device, value):
    """Not NaN: the scores of such a row are all finite, and its softmax is the composite's."""
    q, k, v, mask = fully_masked_row(device, value, fg.float32)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).cpu().numpy()
    ref = F.scaled_dot_product_attention_reference(q, k, v, attn_mask=mask).cpu().numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [fg.float32, fg.float64])
@pytest.mark.parametrize("value", [-1e9, float(np.finfo(np.float32).min)])
def test_gradient_of_a_row_masked_entirely_by_a_huge_finite_value(device, dtype, value):
    """Its max is the mask value and log S is far below that value's rounding: the saved
    statistics keep them apart, so p = exp((s - max) - log S) = 1 / S, as the composite's."""
    if device == "cuda" and dtype == fg.float64:
        pytest.skip("float64 attention on cuda is the composite itself")
    q, k, v, mask = fully_masked_row(device, value, dtype)
    got = fg.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum(), [q, k, v])
    want = fg.autograd.grad(F.scaled_dot_product_attention_reference(q, k, v, attn_mask=mask).sum(), [q, k, v])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.cpu().numpy(), b.cpu().numpy(), rtol=1e-3, atol=1e-4)
