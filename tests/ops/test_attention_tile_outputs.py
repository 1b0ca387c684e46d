"""The CPU single-tile attention kernels' outputs written in place: the output, dQ, dK and dV go
from the products' registers straight into strided views (a packed (B, T, 3 * H * D) gradient,
head-permuted tensors), a head's last vector cut at its head dim, so that no write reaches the
next head's columns; D = rowsum(P * dP) from the tile; a tile arena that is never cleared (only
the padded copies' margins are zeroed). Against float64 NumPy and float64 finite differences, at
head dims that end inside a 16-lane vector (8, 24, 80) and sequence lengths across the 8-row
blocks, causal with T_q != T_k."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import gradcheck, make
from tests.ops.test_attention_fused import numpy_attention
from tests.ops.test_attention_packed_fn import heads, packed_grad
from tests.ops.test_attention_tile import numpy_grads

F = fg.nn.functional


def packed_case(qkv_np, h, causal, dtype=fg.float32):
    """Output and packed gradient of the op against float64 NumPy's."""
    qkv = fg.tensor(qkv_np, dtype=dtype, requires_grad=True)
    out = F.scaled_dot_product_attention_packed(qkv, h, is_causal=causal)
    g = make(np.random.default_rng(3), out.shape, np.float32, -1, 1)
    (got,) = fg.autograd.grad(out, [qkv], fg.tensor(g, dtype=dtype))
    q, k, v = heads(qkv_np.astype(np.float64), h)
    want_grad = packed_grad(*numpy_grads(q, k, v, g.astype(np.float64), causal=causal))
    return out.numpy(), numpy_attention(q, k, v, causal=causal), got.numpy(), want_grad


@pytest.mark.parametrize("T", [9, 63, 64, 100])
@pytest.mark.parametrize("D", [8, 24, 80])
@pytest.mark.parametrize("causal", [False, True])
def test_packed_head_dims_inside_a_vector(rng, T, D, causal):
    """float32, 3 heads: a head's output and gradient columns end inside a vector; a write past
    them would land in the next head's (or the next part's) columns, which the comparison of the
    whole packed gradient sees."""
    got, want, got_grad, want_grad = packed_case(make(rng, (2, T, 3 * 3 * D), np.float32, -1, 1), 3, causal)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("L,S", [(37, 70), (70, 37), (1, 9), (9, 1), (128, 100)])
@pytest.mark.parametrize("D", [8, 24, 32, 64, 80])
def test_causal_queries_and_keys_differ(rng, L, S, D):
    """Causal with T_q != T_k (top-left aligned, as the composite) on head-permuted views of
    (B, T, H, D) tensors: the kernels write the output and gradients through their strides."""
    b, h = 2, 3
    arrays = [make(rng, (b, n, h, D), np.float32, -1, 1) for n in (L, S, S)]
    ts = [fg.tensor(a, requires_grad=True) for a in arrays]
    out = F.scaled_dot_product_attention(*[t.transpose(1, 2) for t in ts], is_causal=True)
    assert out.grad_fn == "<PermuteBackward>"  # the fused op, stored sequence-major
    wide = [a.astype(np.float64).transpose(0, 2, 1, 3) for a in arrays]
    np.testing.assert_allclose(out.numpy(), numpy_attention(*wide, causal=True), rtol=1e-4, atol=2e-5)
    g = make(rng, (b, h, L, D), np.float32, -1, 1)
    got = fg.autograd.grad(out, ts, fg.tensor(g))
    for a, want in zip(got, numpy_grads(*wide, g.astype(np.float64), causal=True)):
        np.testing.assert_allclose(a.numpy(), want.transpose(0, 2, 1, 3), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("T,D,causal", [(9, 8, True), (17, 24, False), (12, 5, True)])
def test_packed_float64_finite_differences(rng, T, D, causal):
    """The tile path's float64 gradient of the packed op against finite differences."""
    gradcheck(lambda qkv: F.scaled_dot_product_attention_packed(qkv, 2, is_causal=causal), make(rng, (2, T, 3 * 2 * D)))


def test_a_reused_arena_keeps_no_stale_values(rng):
    """A call on NaN and inf at T=15, then one on finite values at T=9: both pad to 16 rows, so
    the second's padding rows lie where the first copied its poisoned rows (the arena is not
    cleared between calls; the padded copies must zero their own margins, else the 0 * NaN of
    D = rowsum(P * dP) over the padding spreads NaN over every gradient)."""
    h, D = 2, 24
    poison = np.full((2, 15, 3 * h * D), np.nan, np.float32)
    poison[..., ::3] = np.inf
    packed_case(poison, h, True)
    got, want, got_grad, want_grad = packed_case(make(rng, (2, 9, 3 * h * D), np.float32, -1, 1), h, True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-4, atol=2e-5)


def test_float32_row_statistics_are_exact_enough(rng):
    """q = 0: every score is 0, so row i's softmax sum is exactly i + 1 (causal) and the backward's
    p = exp(-log(i + 1)) rests on the forward's float32 log (computed without libm): dV = P^T g
    within a few float32 roundings of float64's."""
    h, T, D = 2, 100, 16
    qkv_np = make(rng, (2, T, 3 * h * D), np.float32, -1, 1)
    qkv_np[..., : h * D] = 0
    qkv = fg.tensor(qkv_np, requires_grad=True)
    out = F.scaled_dot_product_attention_packed(qkv, h, is_causal=True)
    g = make(rng, out.shape, np.float32, -1, 1)
    (got,) = fg.autograd.grad(out, [qkv], fg.tensor(g))
    q, k, v = heads(qkv_np.astype(np.float64), h)
    want = packed_grad(*numpy_grads(q, k, v, g.astype(np.float64), causal=True))
    dv = slice(2 * h * D, None)
    np.testing.assert_allclose(got.numpy()[..., dv], want[..., dv], rtol=3e-6, atol=1e-6)
