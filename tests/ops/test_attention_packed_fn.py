"""F.scaled_dot_product_attention_packed: q, k, v side by side in one (B, T, 3 * H * D) tensor (on
the CPU the flash_attention_packed op, which reads the head views in place and writes their
gradient into one buffer). Checked against float64 NumPy (forward and the textbook gradients),
float64 finite differences, at head dims 16-128, sequence lengths across the tile's 8-row blocks
and 16-lane vectors, strided qkv, masks (fully masked rows, huge negatives) and the errors."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import gradcheck, make, on
from tests.ops.test_attention_fused import numpy_attention, precision
from tests.ops.test_attention_tile import numpy_grads

F = fg.nn.functional


def assert_fused(out):
    """The fused op's output, stored sequence-major (B, T, H, D) and viewed head-major (the
    composite's matmul gives a head-major tensor)."""
    assert out.grad_fn == "<PermuteBackward>"
    assert out.transpose(1, 2).is_contiguous()


def heads(a, h):
    """(B, T, 3 * h * D) -> q, k, v (B, h, T, D) as NumPy arrays."""
    b, t, w = a.shape
    return [p.reshape(b, t, h, w // (3 * h)).transpose(0, 2, 1, 3) for p in np.split(a, 3, -1)]


def packed_grad(dq, dk, dv):
    """The (B, T, 3 * h * D) gradient of the three (B, h, T, D) ones."""
    return np.concatenate([g.transpose(0, 2, 1, 3).reshape(g.shape[0], g.shape[2], -1) for g in (dq, dk, dv)], -1)


def check(device, qkv_np, h, dtype, rtol, atol, mask=None, causal=False, qkv=None):
    qkv = on(device, fg.tensor(qkv_np, dtype=dtype, requires_grad=True)) if qkv is None else qkv
    tm = None if mask is None else on(device, fg.tensor(mask, dtype=fg.bool if mask.dtype == np.bool_ else dtype))
    out = F.scaled_dot_product_attention_packed(qkv, h, attn_mask=tm, is_causal=causal)
    if device == "cpu":
        assert_fused(out)
    q, k, v = heads(qkv_np.astype(np.float64), h)
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(q, k, v, mask, causal), rtol=rtol, atol=atol)
    g = make(np.random.default_rng(7), out.shape)
    (got,) = fg.autograd.grad(out, [qkv], on(device, fg.tensor(g, dtype=dtype)))
    want = packed_grad(*numpy_grads(q, k, v, g, mask, causal))
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("T", [1, 7, 9, 17, 64, 65, 128])
@pytest.mark.parametrize("D", [16, 24, 32, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_float64_matches_numpy(rng, device, T, D, causal):
    dtype, rtol, atol = precision(device)
    h = 2
    check(device, make(rng, (2, T, 3 * h * D)), h, dtype, rtol, atol, causal=causal)


@pytest.mark.parametrize("T,D", [(64, 32), (63, 24), (128, 16), (33, 128)])
def test_float32_matches_float64_numpy(rng, device, T, D):
    """float32, the transformer's dtype (B16 H4 T64 D32 among them), against float64 NumPy."""
    check(device, make(rng, (3, T, 3 * 4 * D), np.float32, -1, 1), 4, fg.float32, 1e-4, 2e-5, causal=True)


def test_strided_qkv(rng, device):
    """qkv as a column slice of a wider projection and with its batch dim permuted: read in place."""
    dtype, rtol, atol = precision(device)
    h, D, T = 3, 24, 21
    wide = on(device, fg.tensor(make(rng, (T, 2, 3 * h * D + 5)), dtype=dtype, requires_grad=True))
    qkv = wide[:, :, 5:].transpose(0, 1)  # (2, T, 3 h D), rows 2 * (3 h D + 5) apart
    assert not qkv.is_contiguous()
    check(device, qkv.detach().cpu().numpy(), h, dtype, rtol, atol, causal=True, qkv=qkv)


@pytest.mark.parametrize("kind", ["bool", "-inf", "-1e9"])
def test_masks(rng, device, kind):
    """A bool mask with a fully masked row (NaN there, as the composite) and additive padding masks."""
    dtype, rtol, atol = precision(device)
    h, D, T = 2, 16, 40
    if kind == "bool":
        mask = make(rng, (T, T), np.bool_)
        mask[:, 0] = True
        mask[5] = False
    else:
        mask = np.where(np.arange(T)[None, :] >= 30, float(kind), 0.0) + make(rng, (2, 1, T, T), low=-1, high=1)
    qkv = fg.tensor(make(rng, (2, T, 3 * h * D)), dtype=dtype, requires_grad=True)
    tm = on(device, fg.tensor(mask, dtype=fg.bool if kind == "bool" else dtype))
    out = F.scaled_dot_product_attention_packed(on(device, qkv), h, attn_mask=tm, is_causal=True)
    q, k, v = heads(qkv.detach().numpy(), h)
    want = numpy_attention(q, k, v, mask, causal=True)
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=rtol, atol=atol)
    if kind == "bool":
        assert np.isnan(out.cpu().numpy()[:, :, 5]).all()
        return
    g = make(rng, out.shape)
    (got,) = fg.autograd.grad(out, [qkv], on(device, fg.tensor(g, dtype=dtype)))
    np.testing.assert_allclose(got.cpu().numpy(), packed_grad(*numpy_grads(q, k, v, g, mask, True)),
                               rtol=rtol, atol=atol)


def test_mask_that_requires_grad_takes_the_composite(rng):
    h, D, T = 2, 8, 5
    qkv = fg.tensor(make(rng, (1, T, 3 * h * D)), dtype=fg.float64, requires_grad=True)
    mask = fg.tensor(make(rng, (T, T)), dtype=fg.float64, requires_grad=True)
    out = F.scaled_dot_product_attention_packed(qkv, h, attn_mask=mask, is_causal=True)
    q, k, v = (t.detach().contiguous() for t in qkv.chunk(3, -1))
    split = [t.reshape(1, T, h, D).transpose(1, 2) for t in (q, k, v)]
    mask_ref = mask.detach().clone()
    mask_ref.requires_grad = True
    want = F.scaled_dot_product_attention_reference(*split, attn_mask=mask_ref, is_causal=True)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12)
    (got,) = fg.autograd.grad(out.sum(), [mask])
    (ref,) = fg.autograd.grad(want.sum(), [mask_ref])
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(rng, causal):
    """float64 finite differences through the packed op (odd T and head dim)."""
    gradcheck(lambda x: F.scaled_dot_product_attention_packed(x, 2, is_causal=causal), make(rng, (2, 5, 3 * 2 * 3)))


@pytest.mark.parametrize("shape,h", [((2, 5, 20), 2), ((2, 5, 18), 0), ((18,), 1)])
def test_bad_packing_raises(shape, h):
    with pytest.raises(fg.ShapeError, match=r"scaled_dot_product_attention_packed: qkv .* must be \(\.\.\., T, 3 \* heads \* D\)"):
        F.scaled_dot_product_attention_packed(fg.zeros(shape), h)


@pytest.mark.parametrize("D", [16, 24, 32, 64, 128])
@pytest.mark.parametrize("L,S", [(37, 64), (64, 29), (128, 100)])
def test_causal_with_unequal_lengths_on_head_views(rng, device, D, L, S):
    """scaled_dot_product_attention with T_q != T_k, causal, on head-permuted (B, T, H, D) views."""
    dtype, rtol, atol = precision(device)
    h = 2
    arrays = [make(rng, (2, n, h, D)) for n in (L, S, S)]
    ts = [on(device, fg.tensor(a, dtype=dtype, requires_grad=True)) for a in arrays]
    views = [t.transpose(1, 2) for t in ts]
    out = F.scaled_dot_product_attention(*views, is_causal=True)
    if device == "cpu":
        assert_fused(out)
    q, k, v = (a.transpose(0, 2, 1, 3) for a in arrays)
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(q, k, v, causal=True), rtol=rtol, atol=atol)
    g = make(rng, out.shape)
    got = fg.autograd.grad(out, ts, on(device, fg.tensor(g, dtype=dtype)))
    for a, b in zip(got, numpy_grads(q, k, v, g, causal=True)):
        np.testing.assert_allclose(a.cpu().numpy(), b.transpose(0, 2, 1, 3), rtol=rtol, atol=atol)
