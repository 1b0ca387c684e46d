"""The CPU single-tile attention kernels (a head of at most 128 queries and keys: register-blocked
products on copies padded to whole vectors, causal blocks above the diagonal skipped) against
float64 NumPy, the composite's gradients and float64 finite differences: sequence lengths across
the padding and blocking edges (1, 7, 8, 9, 63, 65, 100, 127, 128), odd head dims, causal with
L != S, strided operands, masks (bool with fully masked rows, additive -inf / -1e9 / finfo.min,
ALiBi) and float32 and float64 alike. On cuda the same calls check the CUDA kernels."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import gradcheck, make, on
from tests.ops.test_attention_fused import numpy_attention, precision

F = fg.nn.functional

SHAPES = [  # (batch, L, S, E, Ev)
    ((2,), 65, 65, 32, 32), ((1, 2), 128, 128, 16, 16), ((3,), 100, 70, 33, 17), ((2,), 70, 128, 5, 3),
    ((2,), 1, 128, 64, 64), ((1,), 128, 1, 24, 40), ((2,), 9, 127, 128, 128), ((4,), 63, 8, 7, 9),
    # past 128: backward chunks of query rows, dK and dV summed over them (test_attention_long.py)
    ((2,), 300, 300, 32, 32), ((1,), 270, 520, 33, 17), ((1,), 520, 270, 16, 24), ((1, 2), 200, 200, 8, 8),
    # keys a multiple of 256 bytes: their buffers' rows a cache line longer (key_stride), several chunks
    ((1,), 300, 512, 32, 32), ((1,), 96, 1024, 16, 16),
]


def numpy_grads(q, k, v, g, mask=None, causal=False):
    """float64 dq, dk, dv of sum(attention(q, k, v) * g) by the textbook formulas."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(s.shape[-2])[:, None], -np.inf, s)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / np.sqrt(q.shape[-1])
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ g


def check(device, dtype, rtol, atol, arrays, g, mask=None, causal=False):
    ts = [on(device, fg.tensor(a, dtype=dtype, requires_grad=True)) for a in arrays]
    tm = None if mask is None else on(device, fg.tensor(mask, dtype=fg.bool if mask.dtype == np.bool_ else dtype))
    out = F.scaled_dot_product_attention(*ts, attn_mask=tm, is_causal=causal)
    assert out.grad_fn == "<Flash_attentionBackward>"
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(*arrays, mask, causal), rtol=rtol, atol=atol)
    got = fg.autograd.grad(out, ts, on(device, fg.tensor(g, dtype=dtype)))
    for a, b in zip(got, numpy_grads(*arrays, g, mask, causal)):
        np.testing.assert_allclose(a.cpu().numpy(), b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("batch,L,S,E,Ev", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients_match_numpy(rng, device, batch, L, S, E, Ev, causal):
    dtype, rtol, atol = precision(device)
    arrays = [make(rng, batch + (n, e)) for n, e in ((L, E), (S, E), (S, Ev))]
    check(device, dtype, rtol, atol, arrays, make(rng, batch + (L, Ev)), causal=causal)


@pytest.mark.parametrize("L", [1, 7, 8, 9, 64, 65, 127, 128, 257, 600, 1030])
def test_float32_across_the_block_edges(rng, device, L):
    """float32 (the transformer's dtype) against float64 NumPy, causal, L = S around 8-row blocks
    and 16-wide vectors, and past 128 across the backward's chunks (test_attention_long.py)."""
    arrays = [make(rng, (2, 3, L, 32), np.float32, -1, 1) for _ in range(3)]
    wide = [a.astype(np.float64) for a in arrays]
    g = make(rng, (2, 3, L, 32), np.float32, -1, 1)
    ts = [on(device, fg.tensor(a, requires_grad=True)) for a in arrays]
    out = F.scaled_dot_product_attention(*ts, is_causal=True)
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(*wide, causal=True), rtol=1e-5, atol=1e-5)
    got = fg.autograd.grad(out, ts, on(device, fg.tensor(g)))
    for a, b in zip(got, numpy_grads(*wide, g.astype(np.float64), causal=True)):
        np.testing.assert_allclose(a.cpu().numpy(), b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "-inf", "-1e9", "finfo.min", "alibi"])
@pytest.mark.parametrize("causal", [False, True])
def test_masks(rng, device, kind, causal):
    """L = 100, S = 120: a bool mask, additive padding masks over whole key blocks or all keys but
    the first, an ALiBi bias; every row keeps a key (fully masked rows: the next test)."""
    dtype, rtol, atol = precision(device)
    L, S = 100, 120
    arrays = [make(rng, (2, 2, n, 16), low=-1, high=1) for n in (L, S, S)]
    g = make(rng, (2, 2, L, 16))
    i, j = np.arange(L)[:, None], np.arange(S)[None, :]
    if kind == "alibi":
        mask = -0.5 * np.abs(i - j) * np.ones((2, 1, 1, 1))
    elif kind == "bool":
        mask = make(rng, (2, 1, L, S), np.bool_)
        mask[..., 0] = True
    else:
        fill = {"-inf": -np.inf, "-1e9": -1e9, "finfo.min": float(np.finfo(np.float32).min)}[kind]
        mask = np.zeros((2, 1, 1, S))
        mask[0, ..., 40:90] = fill  # whole key blocks
        mask[1, ..., 1:] = fill  # all but the first key
    check(device, dtype, rtol, atol, arrays, g, mask, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_fully_masked_row_reaches_every_key_also_under_causal_skipping(rng, device, causal):
    """A query row with no key: its output and dq row are NaN and the other rows are the
    composite's; its NaN probabilities reach dv (as the composite) and dk of every key, also where
    the causal blocks above the diagonal would otherwise be skipped."""
    dtype, rtol, atol = precision(device)
    L, S = 80, 96
    ts = [on(device, fg.tensor(make(rng, (2, n, 8)), dtype=dtype, requires_grad=True)) for n in (L, S, S)]
    mask = np.ones((L, S), dtype=bool)
    mask[5] = False
    tm = on(device, fg.tensor(mask))
    out = F.scaled_dot_product_attention(*ts, attn_mask=tm, is_causal=causal)
    ref = F.scaled_dot_product_attention_reference(*ts, attn_mask=tm, is_causal=causal)
    (dq, dk, dv), (ref_dq, _, ref_dv) = (fg.autograd.grad(o.sum(), ts) for o in (out, ref))
    for got, want in ((out, ref), (dq, ref_dq)):
        got, want = got.cpu().numpy(), want.cpu().numpy()
        assert np.isnan(got[:, 5]).all()
        np.testing.assert_allclose(np.delete(got, 5, axis=1), np.delete(want, 5, axis=1), rtol=rtol, atol=atol)
    assert np.isnan(dk.cpu().numpy()).all() and np.isnan(dv.cpu().numpy()).all()
    assert np.isnan(ref_dv.cpu().numpy()).all()


@pytest.mark.parametrize("T", [65, 100, 128, 290])  # 290: three backward chunks
@pytest.mark.parametrize("causal", [False, True])
def test_packed_qkv_views(rng, device, T, causal):
    """q, k, v as head views of one (B, T, 3 * H * E) projection (strided rows, read in place on the
    CPU) with an odd head dim; the gradient flows back into the projection."""
    dtype, rtol, atol = precision(device)
    b, h, e = 2, 3, 11
    qkv_np = make(rng, (b, T, 3 * h * e))
    qkv = on(device, fg.tensor(qkv_np, dtype=dtype, requires_grad=True))
    q, k, v = (p.reshape(b, T, h, e).transpose(1, 2) for p in qkv.chunk(3, -1))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    arrays = [np.swapaxes(p.reshape(b, T, h, e), 1, 2) for p in np.split(qkv_np, 3, -1)]
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(*arrays, causal=causal), rtol=rtol, atol=atol)
    g = make(rng, out.shape)
    (dqkv,) = fg.autograd.grad(out, [qkv], on(device, fg.tensor(g, dtype=dtype)))
    want = [np.swapaxes(d, 1, 2).reshape(b, T, h * e) for d in numpy_grads(*arrays, g, causal=causal)]
    np.testing.assert_allclose(dqkv.cpu().numpy(), np.concatenate(want, -1), rtol=rtol, atol=atol)


@pytest.mark.parametrize("L,S,causal", [(9, 17, True), (17, 9, True), (20, 20, False)])
def test_gradcheck(rng, device, L, S, causal):
    if device != "cpu":
        pytest.skip("float64 takes the composite on cuda; the other tests check the kernels there")
    m = make(rng, (L, S))

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=fg.tensor(m), is_causal=causal)

    gradcheck(fn, make(rng, (1, L, 5)), make(rng, (1, S, 5)), make(rng, (1, S, 3)))
