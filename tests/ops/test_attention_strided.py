"""scaled_dot_product_attention on strided views: the qkv split and head permute of
MultiheadAttention (read in place on the CPU, output and gradients stored sequence-major), sliced
and expanded operands, and the single-tile path (L, S <= 128) against the flash loop beyond it;
checked against NumPy, the composite on contiguous copies and float64 finite differences."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import gradcheck, make, on
from tests.ops.test_attention_fused import numpy_attention, precision

F = fg.nn.functional


def qkv_heads(qkv, heads):
    """(B, T, 3 * H * D) -> three (B, H, T, D) views, as MultiheadAttention splits its projection."""
    b, t, width = qkv.shape
    d = width // 3 // heads
    return [p.reshape(b, t, heads, d).transpose(1, 2) for p in qkv.chunk(3, -1)]


def heads_numpy(qkv, heads):
    b, t, width = qkv.shape
    return [np.swapaxes(p.reshape(b, t, heads, -1), 1, 2) for p in np.split(qkv, 3, -1)]


def contiguous_copies(*ts):
    return [fg.tensor(t.detach().cpu().numpy(), dtype=t.dtype, requires_grad=True) for t in ts]


@pytest.mark.parametrize("T", [1, 7, 64, 65, 128, 130])
@pytest.mark.parametrize("causal", [False, True])
def test_qkv_split_views_forward_and_backward(rng, device, T, causal):
    dtype, rtol, atol = precision(device)
    qkv_np = make(rng, (2, T, 3 * 3 * 8))
    qkv = on(device, fg.tensor(qkv_np, dtype=dtype, requires_grad=True))
    q, k, v = qkv_heads(qkv, 3)
    assert not q.is_contiguous()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    np.testing.assert_allclose(out.cpu().numpy(), numpy_attention(*heads_numpy(qkv_np, 3), causal=causal),
                               rtol=rtol, atol=atol)
    g = on(device, fg.tensor(make(rng, out.shape), dtype=dtype))
    (got,) = fg.autograd.grad((out * g).sum(), [qkv])
    rq, rk, rv = contiguous_copies(q, k, v)
    ref = F.scaled_dot_product_attention_reference(rq, rk, rv, is_causal=causal)
    want = fg.autograd.grad((ref * g.cpu()).sum(), [rq, rk, rv])
    # the qkv gradient is the three head gradients merged back: (B, H, T, D) -> (B, T, H * D), side by side
    merged = np.concatenate([np.swapaxes(w.numpy(), 1, 2).reshape(2, T, -1) for w in want], -1)
    np.testing.assert_allclose(got.cpu().numpy(), merged, rtol=rtol, atol=atol)


def test_head_permuted_output_and_gradients_are_sequence_major(rng):
    """On the CPU the output of head-permuted q, k, v is a view of (B, T, H, D) storage, so merging
    the heads back (transpose + reshape) copies nothing; so are the gradients of q, k, v."""
    qkv = fg.tensor(make(rng, (2, 5, 3 * 4 * 8)), requires_grad=True)
    q, k, v = qkv_heads(qkv, 4)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.shape == (2, 4, 5, 8) and not out.is_contiguous()
    assert out.transpose(1, 2).is_contiguous()
    out.backward(fg.ones_like(out))
    assert qkv.grad.shape == qkv.shape


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"), (True, "additive")])
@pytest.mark.parametrize("T", [1, 6])
def test_gradcheck_through_head_views(rng, device, causal, mask, T):
    if device != "cpu":
        pytest.skip("float64 takes the composite on cuda; the fused kernels are checked in test_attention_fused")
    m = None
    if mask == "bool":
        m = make(rng, (T, T), np.bool_)
        m[:, 0] = True
    elif mask == "additive":
        m = make(rng, (1, T, T))
    tm = None if m is None else fg.tensor(m)

    def fn(qkv):
        q, k, v = qkv_heads(qkv, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=tm, is_causal=causal)
        if out.requires_grad:  # the fused op's sequence-major output viewed head-major (not the composite's matmul)
            assert out.grad_fn == "<PermuteBackward>"
        return out

    gradcheck(fn, make(rng, (2, T, 3 * 2 * 3)))


def test_second_order_through_head_views(rng):
    """create_graph: the backward of a sequence-major op is built from public ops, as the composite's."""
    qkv = fg.tensor(make(rng, (1, 5, 3 * 2 * 4)), dtype=fg.float64, requires_grad=True)
    ref_qkv = fg.tensor(qkv.numpy(), dtype=fg.float64, requires_grad=True)
    results = []
    for x, attend in ((qkv, F.scaled_dot_product_attention), (ref_qkv, F.scaled_dot_product_attention_reference)):
        out = attend(*qkv_heads(x, 2), is_causal=True)
        (g,) = fg.autograd.grad((out * out).sum(), [x], create_graph=True)
        (gg,) = fg.autograd.grad((g * g).sum(), [x])
        results.append((g.numpy(), gg.numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("layout", ["sliced last dim", "expanded rows", "mixed", "sliced batch"])
def test_other_strided_operands(rng, device, layout):
    """Views the kernels cannot read in place (no unit column stride, rows that overlap) are copied;
    the rest are read where they are. Values and gradients match the contiguous composite."""
    dtype, rtol, atol = precision(device)
    q, k, v = (on(device, fg.tensor(make(rng, (3, 2, 9, 16)), dtype=dtype, requires_grad=True)) for _ in range(3))
    if layout == "sliced last dim":
        views = (q[..., ::2], k[..., ::2], v[..., 1::2])
    elif layout == "expanded rows":
        views = (q[:, :, :1].expand(3, 2, 9, 16), k, v)
    elif layout == "mixed":
        views = (q.transpose(1, 2).contiguous().transpose(1, 2), k, v.transpose(-1, -2).contiguous().transpose(-1, -2))
    else:
        views = (q[::2], k[1:], v[:2])
    out = F.scaled_dot_product_attention(*views, is_causal=True)
    copies = contiguous_copies(*views)
    ref = F.scaled_dot_product_attention_reference(*copies, is_causal=True)
    np.testing.assert_allclose(out.cpu().numpy(), ref.numpy(), rtol=rtol, atol=atol)
    got = fg.autograd.grad(out.sum(), list(views))
    want = fg.autograd.grad(ref.sum(), copies)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.cpu().numpy(), b.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("S", [7, 64, 65, 128, 129])
@pytest.mark.parametrize("fill", [float("-inf"), "finfo.min", -1e4])
def test_single_tile_masked_rows(rng, device, S, fill):
    """Around the single-tile limit (S <= 128 one tile, 129 the flash loop): a fully masked row
    (-inf: NaN, as the composite; finfo.min or -1e4: uniform weights) and the other rows exact."""
    dtype, rtol, atol = precision(device)
    fill = float(np.finfo(np.float64 if dtype == fg.float64 else np.float32).min) if fill == "finfo.min" else fill
    q, k, v = tensors = [on(device, fg.tensor(make(rng, (2, 5, n, 8)), dtype=dtype, requires_grad=True))
                         for n in (9, S, S)]
    mask = np.zeros((9, S))
    mask[3] = fill
    mask[5, : S // 2] = fill
    tm = on(device, fg.tensor(mask, dtype=dtype))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=tm)
    ref = F.scaled_dot_product_attention_reference(q, k, v, attn_mask=tm)
    np.testing.assert_allclose(out.cpu().numpy(), ref.cpu().numpy(), rtol=rtol, atol=atol)
    got, want = (fg.autograd.grad(o.sum(), tensors) for o in (out, ref))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.cpu().numpy(), b.cpu().numpy(), rtol=rtol, atol=atol)


def test_bfloat16_head_views_match_the_composite(rng):
    """Half types on the CPU compute in float32 copies, then write the sequence-major storage."""
    qkv = fg.tensor(make(rng, (2, 6, 3 * 2 * 8)), dtype=fg.bfloat16, requires_grad=True)
    q, k, v = qkv_heads(qkv, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention_reference(q, k, v, is_causal=True)
    assert out.dtype == fg.bfloat16
    np.testing.assert_allclose(out.float().numpy(), ref.float().numpy(), rtol=2e-2, atol=2e-2)
    (got,) = fg.autograd.grad(out.sum(), [qkv])
    (want,) = fg.autograd.grad(ref.sum(), [qkv])
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=5e-2, atol=5e-2)


def test_packed_ops_run_under_multihead_attention(rng):
    """flash_attention_packed and flash_attention_packed_backward: MultiheadAttention's self-attention
    on the CPU, here on a non-contiguous input, against its heads through the composite."""
    m = fg.nn.MultiheadAttention(8, 2, causal=True)
    x = fg.tensor(make(rng, (5, 2, 8)).astype(np.float32)).transpose(0, 1)
    qkv = F.linear(x, m.qkv.weight, m.qkv.bias)
    q, k, v = (t.contiguous() for t in qkv_heads(qkv, 2))
    heads = F.scaled_dot_product_attention_reference(q, k, v, is_causal=True)
    want = F.linear(heads.transpose(1, 2).reshape(2, 5, 8), m.proj.weight, m.proj.bias)
    got = m(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    w = m.qkv.weight
    (g_got,) = fg.autograd.grad(got.sum(), [w])
    (g_want,) = fg.autograd.grad(want.sum(), [w])
    np.testing.assert_allclose(g_got.numpy(), g_want.numpy(), rtol=1e-4, atol=1e-5)
    ops = {op["name"]: op for op in fg._core._op_registry()}
    for name in ("flash_attention_packed", "flash_attention_packed_backward"):
        assert "CPU layout" in ops[name]["cuda_missing"]



def test_six_batch_dims(rng):
    """The most batch dims a tensor can have (8 dims in all), head-permuted: read in place."""
    a = make(rng, (1, 2, 1, 1, 2, 5, 3, 8))
    q, k, v = (fg.tensor(a, dtype=fg.float64, requires_grad=True).transpose(-2, -3) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.transpose(-2, -3).is_contiguous()
    np.testing.assert_allclose(out.detach().numpy(), numpy_attention(*(np.swapaxes(a, -2, -3),) * 3, causal=True),
                               rtol=1e-10, atol=1e-12)
