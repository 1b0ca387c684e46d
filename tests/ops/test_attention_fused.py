"""The fused flash_attention op behind fg.nn.functional.scaled_dot_product_attention, checked
against the composite reference (scaled_dot_product_attention_reference), NumPy, and float64
finite differences; flash_attention_backward against the composite's gradients."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import gradcheck, make, on

F = fg.nn.functional


def numpy_attention(q, k, v, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        L, S = s.shape[-2:]
        s = np.where(np.arange(S)[None, :] > np.arange(L)[:, None], -np.inf, s)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
    return p @ v


def precision(device):
    """(dtype, rtol, atol): float64 on the CPU; float32 on cuda, where float64 takes the composite."""
    return (fg.float64, 1e-9, 1e-11) if device == "cpu" else (fg.float32, 1e-4, 1e-5)


def fused(q, k, v, **kw):
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    if out.requires_grad:  # gradcheck's finite differences run without grad
        assert out.grad_fn == "<Flash_attentionBackward>"
    return out


def tensors(rng, device, *shapes, dtype=fg.float64, requires_grad=False):
    return [on(device, fg.tensor(make(rng, s), dtype=dtype, requires_grad=requires_grad)) for s in shapes]


SHAPES = [  # (batch, L, S, E, Ev)
    ((2, 3), 5, 7, 32, 32), ((1,), 1, 9, 64, 64), ((2,), 70, 1, 16, 16), ((), 130, 67, 80, 80),
    ((3,), 65, 129, 128, 128), ((2,), 9, 9, 5, 3), ((0, 2), 4, 6, 8, 8),
]


@pytest.mark.parametrize("batch,L,S,E,Ev", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_numpy_and_composite(rng, device, batch, L, S, E, Ev, causal):
    dtype, rtol, atol = precision(device)
    q, k, v = (make(rng, batch + (n, e)) for n, e in ((L, E), (S, E), (S, Ev)))
    tq, tk, tv = (on(device, fg.tensor(a, dtype=dtype)) for a in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    ref = F.scaled_dot_product_attention_reference(tq, tk, tv, is_causal=causal)
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(q, k, v, causal=causal), rtol=rtol, atol=atol)
    np.testing.assert_allclose(out.cpu().numpy(), ref.cpu().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("mask_shape", [(7, 9), (1, 9), (3, 1, 9), (2, 1, 7, 9), (9,)])
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masks_broadcast(rng, device, mask_shape, kind):
    q, k, v = make(rng, (2, 3, 7, 16)), make(rng, (2, 3, 9, 16)), make(rng, (2, 3, 9, 8))
    mask = make(rng, mask_shape, np.bool_) if kind == "bool" else make(rng, mask_shape)
    if kind == "bool":
        mask[..., 0] = True  # no fully masked row here
    dtype, rtol, atol = precision(device)
    tq, tk, tv = (on(device, fg.tensor(a, dtype=dtype)) for a in (q, k, v))
    tm = on(device, fg.tensor(mask, dtype=fg.bool if kind == "bool" else dtype))
    for causal in (False, True):
        out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal)
        expected = numpy_attention(q, k, v, mask, causal)
        np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=rtol, atol=atol)


def test_fully_masked_row_is_nan_like_the_composite(rng, device):
    """A query row whose keys are all masked has no softmax: NaN on both paths (as PyTorch's math
    backend), while the other rows are unaffected."""
    dtype, rtol, atol = precision(device)
    q, k, v = tensors(rng, device, (2, 4, 8), (2, 6, 8), (2, 6, 8), dtype=dtype, requires_grad=True)
    mask = np.ones((4, 6), dtype=bool)
    mask[2] = False
    tm = on(device, fg.tensor(mask))
    out = fused(q, k, v, attn_mask=tm)
    ref = F.scaled_dot_product_attention_reference(q, k, v, attn_mask=tm)
    got, want = out.cpu().numpy(), ref.cpu().numpy()
    assert np.isnan(got[:, 2]).all() and np.isnan(want[:, 2]).all()
    np.testing.assert_allclose(np.delete(got, 2, axis=1), np.delete(want, 2, axis=1), rtol=rtol, atol=atol)
    (dq,) = fg.autograd.grad(out.sum(), [q])
    assert np.isnan(dq.cpu().numpy()[:, 2]).all()


def test_non_contiguous_inputs(rng, device):
    """Heads split by a transpose, as MultiheadAttention does: (B, T, H, D) -> (B, H, T, D)."""
    dtype, rtol, atol = precision(device)
    q, k, v = (make(rng, (2, 11, 3, 16)) for _ in range(3))
    tq, tk, tv = (on(device, fg.tensor(a, dtype=dtype)).transpose(1, 2) for a in (q, k, v))
    assert not tq.is_contiguous()
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    expected = numpy_attention(*(np.swapaxes(a, 1, 2) for a in (q, k, v)), causal=True)
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"), (True, "additive")])
def test_gradcheck(rng, device, causal, mask):
    if device != "cpu":
        pytest.skip("float64 takes the composite on cuda; test_backward_matches_composite checks the kernels there")
    m = None
    if mask == "bool":
        m = make(rng, (3, 5), np.bool_)
        m[:, 0] = True
    elif mask == "additive":
        m = make(rng, (1, 3, 5))
    tm = None if m is None else on(device, fg.tensor(m))

    def fn(q, k, v):
        return fused(on(device, q), on(device, k), on(device, v), attn_mask=tm, is_causal=causal)

    gradcheck(fn, make(rng, (2, 3, 4)), make(rng, (2, 5, 4)), make(rng, (2, 5, 3)))


@pytest.mark.parametrize("batch,L,S,E,Ev", SHAPES)
def test_backward_matches_composite(rng, device, batch, L, S, E, Ev):
    dtype, rtol, atol = precision(device)
    shapes = (batch + (L, E), batch + (S, E), batch + (S, Ev))
    for causal, use_mask in ((False, False), (True, False), (True, True)):
        q, k, v = tensors(rng, device, *shapes, dtype=dtype, requires_grad=True)
        mask = make(rng, (L, S)) if use_mask else None
        tm = None if mask is None else on(device, fg.tensor(mask, dtype=dtype))
        g = on(device, fg.tensor(make(rng, batch + (L, Ev)), dtype=dtype))
        got = fg.autograd.grad((fused(q, k, v, attn_mask=tm, is_causal=causal) * g).sum(), [q, k, v])
        ref = F.scaled_dot_product_attention_reference(q, k, v, attn_mask=tm, is_causal=causal)
        want = fg.autograd.grad((ref * g).sum(), [q, k, v])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.cpu().numpy(), b.cpu().numpy(), rtol=rtol, atol=atol)


def test_second_order_gradients_match_the_composite(rng, device):
    """create_graph differentiates the composite rule: second-order gradients agree."""
    dtype, rtol, atol = precision(device)
    q, k, v = tensors(rng, device, (2, 3, 4), (2, 5, 4), (2, 5, 2), dtype=dtype, requires_grad=True)
    results = []
    for attend in (fused, F.scaled_dot_product_attention_reference):
        out = attend(q, k, v, is_causal=True)
        (dq,) = fg.autograd.grad((out * out).sum(), [q], create_graph=True)
        results.append(fg.autograd.grad((dq * dq).sum(), [q, k, v]))
    for a, b in zip(*results):
        np.testing.assert_allclose(a.cpu().numpy(), b.cpu().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype,tol", [(fg.float32, 2e-6), (fg.bfloat16, 2e-2), (fg.float16, 2e-3)])
def test_low_precision_inputs(rng, device, dtype, tol):
    """float32 (and on the CPU the widened half types) against the float64 composite."""
    q, k, v = (make(rng, (2, 2, 33, 64), low=-1, high=1) for _ in range(3))
    lo = [on(device, fg.tensor(a).to(dtype)) for a in (q, k, v)]
    for t in lo:
        t.requires_grad = True
    out = F.scaled_dot_product_attention(*lo, is_causal=True)
    assert out.dtype == dtype
    wide = [fg.tensor(t.float().cpu().numpy().astype(np.float64)) for t in lo]
    ref = numpy_attention(*(w.numpy() for w in wide), causal=True)
    np.testing.assert_allclose(out.float().cpu().numpy(), ref, rtol=tol, atol=tol)
    grads = fg.autograd.grad(out.float().sum(), lo)
    for w in wide:
        w.requires_grad = True
    want = fg.autograd.grad(F.scaled_dot_product_attention_reference(*wide, is_causal=True).sum(), wide)
    for a, b in zip(grads, want):
        assert a.dtype == dtype
        np.testing.assert_allclose(a.float().cpu().numpy(), b.numpy(), rtol=4 * tol, atol=4 * tol)


def test_fallbacks_give_the_composite(rng, device):
    """Batch dims that differ (broadcast), an empty key sequence and a mask that wants a gradient
    go through the composite."""
    dtype, rtol, atol = precision(device)
    q, k, v = tensors(rng, device, (2, 3, 4), (1, 5, 4), (1, 5, 4), dtype=dtype)
    out = F.scaled_dot_product_attention(q, k, v)
    expected = numpy_attention(*(t.cpu().numpy().astype(np.float64) for t in (q, k, v)))
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=rtol, atol=atol)
    q, k, v = tensors(rng, device, (3, 4), (0, 4), (0, 2), dtype=dtype)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v).cpu().numpy(), np.zeros((3, 2)))
    q, k, v, m = tensors(rng, device, (3, 4), (5, 4), (5, 2), (3, 5), dtype=dtype, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert out.grad_fn != "<Flash_attentionBackward>"
    (dm,) = fg.autograd.grad(out.sum(), [m])
    assert dm.shape == (3, 5)


def test_flash_attention_ops_in_registry():
    ops = {op["name"]: op for op in fg._core._op_registry()}
    assert ops["flash_attention"]["has_backward"]
    assert "second order" in ops["flash_attention_backward"]["not_differentiable"]
    assert ops["flash_attention"]["cuda"] == fg.cuda.built_with_cuda()


def test_errors(rng, device):
    q, k, v = tensors(rng, device, (2, 3, 4), (2, 5, 4), (2, 5, 6))
    sdpa = F.scaled_dot_product_attention
    with pytest.raises(fg.ShapeError, match=r"scaled_dot_product_attention: q \(2, 3, 4\) and k \(2, 5, 3\) must share the embedding dim"):
        sdpa(q, k[..., :3], v)
    with pytest.raises(fg.ShapeError, match=r"k \(2, 5, 4\) and v \(2, 4, 6\) must share the sequence dim"):
        sdpa(q, k, v[:, :4])
    with pytest.raises(fg.ShapeError, match=r"must be \(\.\.\., L, E\), got \(4,\)"):
        sdpa(q[0, 0], k, v)
    with pytest.raises(fg.DTypeError, match="q, k, v must share one floating dtype, got float32"):
        sdpa(q.float(), k, v)
    with pytest.raises(fg.DTypeError, match="q, k, v must share one floating dtype, got int64"):
        sdpa(*(t.to(fg.int64) for t in (q, k, v)))
    with pytest.raises(fg.DTypeError, match="attn_mask must be bool .* or floating .*, got int32"):
        sdpa(q, k, v, attn_mask=on(device, fg.zeros((3, 5), dtype=fg.int32)))
    with pytest.raises(fg.ShapeError, match=r"scaled_dot_product_attention: shapes \(4, 5\) and \(2, 3, 5\) cannot be broadcast"):
        sdpa(q, k, v, attn_mask=on(device, fg.zeros((4, 5))))
    if device == "cuda":
        with pytest.raises(fg.DeviceError, match="q, k, v must be on one device"):
            sdpa(q, k.cpu(), v)
        with pytest.raises(fg.DeviceError, match="attn_mask .* is not on q's device cuda"):
            sdpa(q, k, v, attn_mask=fg.zeros((3, 5)))

