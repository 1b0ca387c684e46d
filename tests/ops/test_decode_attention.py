"""One query row per head (a decode step; kernels/attention/decode_attention*): scaled_dot_product_attention
with L = 1 runs the split-keys kernel, which reads only the keys the mask lets through. Against the masked
full attention in NumPy: a KV cache's length masks (odd lengths, lengths across the 128-key split edges, the
whole cache), broadcast, per-head and additive masks, causal, every key masked (NaN, as the composite),
strided queries, float32/float64/bfloat16, one and two threads, float64 gradients (the backward reads the
statistics it writes), one compiled plan for every length, each instruction-set level, every device."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import ISA_LEVELS, gradcheck, make, run_at_isa

F = fg.nn.functional


def reference(q, k, v, keep):
    """softmax(q k^T / sqrt(E) where keep, else -inf) v in float64; keep broadcasts to (B, H, 1, S)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(np.broadcast_to(keep, scores.shape), scores, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(scores - scores.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v


def length_mask(lengths, s):
    """(B, 1, 1, S): key j of row b attends when j < lengths[b] (a KV cache holding lengths[b] positions)."""
    return (np.arange(s).reshape(1, 1, 1, s) < np.asarray(lengths).reshape(-1, 1, 1, 1))


# (batch, heads, S, E, Ev)
SHAPES = [(1, 1, 1, 1, 1), (1, 4, 232, 64, 64), (3, 2, 129, 7, 9), (2, 3, 300, 65, 33), (8, 4, 40, 16, 16),
          (2, 1, 517, 32, 128)]


def lengths_for(rng, batch, s):
    """Odd lengths, the whole cache in row 0, a split edge past 128 in row 1."""
    n = rng.integers(1, s + 1, size=batch)
    n[0] = s
    if batch > 1:
        n[1] = min(s, 129)
    return n


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_length_masks_match_numpy(rng, shape, threads, restore_threads):
    fg.set_num_threads(threads)
    b, h, s, e, ev = shape
    q, k, v = make(rng, (b, h, 1, e)), make(rng, (b, h, s, e)), make(rng, (b, h, s, ev))
    keep = length_mask(lengths_for(rng, b, s), s)
    want = reference(q, k, v, keep)
    got = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), attn_mask=fg.tensor(keep))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    got32 = F.scaled_dot_product_attention(*(fg.tensor(a, dtype=fg.float32) for a in (q, k, v)),
                                           attn_mask=fg.tensor(keep))
    np.testing.assert_allclose(got32.numpy(), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mask_shape", [(1, 1, 1, 300), (2, 3, 1, 300), (300,), None])
def test_broadcast_per_head_and_additive_masks(rng, mask_shape):
    q, k, v = make(rng, (2, 3, 1, 16)), make(rng, (2, 3, 300, 16)), make(rng, (2, 3, 300, 8))
    if mask_shape is None:  # no mask: every key
        np.testing.assert_allclose(F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v)).numpy(),
                                   reference(q, k, v, True), rtol=1e-12, atol=1e-12)
        return
    keep = rng.random(mask_shape) > 0.4
    keep[..., 0] = True  # no row fully masked here
    got = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), attn_mask=fg.tensor(keep))
    np.testing.assert_allclose(got.numpy(), reference(q, k, v, keep), rtol=1e-12, atol=1e-12)
    additive = make(rng, mask_shape)
    got = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), attn_mask=fg.tensor(additive))
    scores = q @ np.swapaxes(k, -1, -2) / 4.0 + additive
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-12, atol=1e-12)


def test_causal_one_query_attends_the_first_key_and_a_fully_masked_row_is_nan(rng):
    q, k, v = make(rng, (2, 2, 1, 8)), make(rng, (2, 2, 200, 8)), make(rng, (2, 2, 200, 5))
    got = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), is_causal=True)
    np.testing.assert_allclose(got.numpy(), np.broadcast_to(v[:, :, :1], got.shape), rtol=1e-12, atol=1e-12)
    keep = length_mask([0, 150], 200)
    got = F.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v), attn_mask=fg.tensor(keep)).numpy()
    ref = F.scaled_dot_product_attention_reference(fg.tensor(q), fg.tensor(k), fg.tensor(v),
                                                   attn_mask=fg.tensor(keep)).numpy()
    assert np.isnan(got[0]).all() and np.isnan(ref[0]).all()
    np.testing.assert_allclose(got[1], reference(q, k, v, keep)[1], rtol=1e-12, atol=1e-12)


def test_strided_query_and_cache_views(rng):
    """q as the head permute of a (B, 1, H, E) projection; keys and values a slice of a longer cache."""
    q = make(rng, (2, 1, 3, 16))
    k, v = make(rng, (2, 3, 57, 16)), make(rng, (2, 3, 57, 16))
    keep = length_mask([17, 50], 50)
    got = F.scaled_dot_product_attention(fg.tensor(q).transpose(1, 2), fg.tensor(k)[:, :, :50], fg.tensor(v)[:, :, :50],
                                         attn_mask=fg.tensor(keep))
    want = reference(q.transpose(0, 2, 1, 3), k[:, :, :50], v[:, :, :50], keep)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_bfloat16_runs_in_float32(rng):
    args = [fg.tensor(make(rng, shape), dtype=fg.bfloat16) for shape in ((1, 2, 1, 32), (1, 2, 264, 32),
                                                                         (1, 2, 264, 32))]
    keep = length_mask([201], 264)
    got = F.scaled_dot_product_attention(*args, attn_mask=fg.tensor(keep))
    assert got.dtype == fg.bfloat16
    want = reference(*(a.float().numpy() for a in args), keep)
    np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-2, atol=2e-2)


def test_float64_gradients_through_the_statistics(rng):
    keep = fg.tensor(length_mask([3, 140], 150))
    gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
              make(rng, (2, 1, 1, 4)), make(rng, (2, 1, 150, 4)), make(rng, (2, 1, 150, 3)))


def test_one_compiled_plan_serves_every_length(rng):
    """The mask is made in the plan from a length tensor: one plan, replayed with new lengths."""
    q, k, v = (make(rng, shape, np.float32) for shape in ((2, 2, 1, 8), (2, 2, 300, 8), (2, 2, 300, 8)))
    fq, fk, fv = fg.tensor(q), fg.tensor(k), fg.tensor(v)

    def step(n):
        mask = fg.arange(300).reshape(1, 1, 1, 300) < n.reshape(2, 1, 1, 1)
        return F.scaled_dot_product_attention(fq, fk, fv, attn_mask=mask)

    with fg.no_grad():
        plan = fg.ForwardPlan(step, (fg.tensor(np.array([1, 1])),))
        for n in ([1, 2], [127, 128], [129, 300], [256, 5]):
            np.testing.assert_allclose(plan(fg.tensor(np.array(n))).numpy(), reference(q, k, v, length_mask(n, 300)),
                                       rtol=2e-5, atol=2e-5)


def test_on_every_device_matches_numpy(rng, device):
    b, h, s, e = 3, 4, 300, 64
    q, k, v = (make(rng, shape, np.float32) for shape in ((b, h, 1, e), (b, h, s, e), (b, h, s, e)))
    keep = length_mask([1, 129, 300], s)
    got = F.scaled_dot_product_attention(*(fg.tensor(a, device=device) for a in (q, k, v)),
                                         attn_mask=fg.tensor(keep, device=device))
    assert got.device.type == device
    np.testing.assert_allclose(got.to("cpu").numpy(), reference(q, k, v, keep), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_every_isa_level_matches_numpy(level):
    out = run_at_isa(level, """
        rng = np.random.default_rng(5)
        worst = 0.0
        for b, h, s, e, ev in [(1, 4, 232, 64, 64), (3, 2, 129, 7, 9), (2, 3, 300, 65, 33), (1, 1, 5, 3, 1)]:
            for dtype in (np.float32, np.float64):
                q, k, v = (rng.standard_normal(shape).astype(dtype) for shape in
                           ((b, h, 1, e), (b, h, s, e), (b, h, s, ev)))
                n = rng.integers(1, s + 1, size=b)
                keep = np.arange(s).reshape(1, 1, 1, s) < n.reshape(-1, 1, 1, 1)
                got = fg.nn.functional.scaled_dot_product_attention(fg.tensor(q), fg.tensor(k), fg.tensor(v),
                                                                     attn_mask=fg.tensor(keep)).numpy()
                for i in range(b):
                    sc = q[i].astype(np.float64) @ np.swapaxes(k[i, :, :n[i]], -1, -2) / np.sqrt(e)
                    p = np.exp(sc - sc.max(-1, keepdims=True))
                    worst = max(worst, np.abs(got[i] - (p / p.sum(-1, keepdims=True)) @ v[i, :, :n[i]]).max())
        print(worst)
    """)
    assert float(out) < 2e-5
