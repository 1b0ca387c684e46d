"""The CPU attention kernels past 128 queries and keys, where the backward runs in chunks of query
rows (those whose probabilities fit in L2: fewer than L once S is past about 180) and sums dK and
dV over them, and the forward may split a head's rows over threads: masks (a fully masked row
turns off causal block skipping), float64 finite differences, one head on one and two threads.
Odd head dims, L != S on both sides under a causal mask, float32 at T = 257, 600 and 1030 and
strided head views of a packed projection at T = 290 are among test_attention_tile.py's cases.
On cuda the same calls check the CUDA kernels."""
import numpy as np
import pytest

import flowgrad as fg
from tests.conftest import gradcheck, make, on
from tests.ops.test_attention_fused import numpy_attention, precision
from tests.ops.test_attention_tile import check

F = fg.nn.functional

@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("causal", [False, True])
def test_masks(rng, device, kind, causal):
    """A bool mask with a fully masked row (NaN output and gradients over every key, as the
    composite, so no causal block is skipped) and an additive one, broadcast over the heads."""
    dtype, rtol, atol = precision(device)
    L, S = 260, 300
    arrays = [make(rng, (2, n, e)) for n, e in ((L, 16), (S, 16), (S, 16))]
    g = make(rng, (2, L, 16))
    if kind == "bool":
        mask = make(rng, (L, S), np.bool_)
        mask[:, 0] = True
        check(device, dtype, rtol, atol, arrays, g, mask, causal)
        mask[7] = False  # row 7 sees no key: NaN there, in dq's row 7 and in every dk, dv
        ts = [on(device, fg.tensor(a, dtype=dtype, requires_grad=True)) for a in arrays]
        out = F.scaled_dot_product_attention(*ts, attn_mask=on(device, fg.tensor(mask)), is_causal=causal)
        assert np.isnan(out.cpu().numpy()[:, 7]).all() and not np.isnan(np.delete(out.cpu().numpy(), 7, 1)).any()
        dq, dk, dv = fg.autograd.grad(out, ts, on(device, fg.tensor(g, dtype=dtype)))
        assert np.isnan(dk.cpu().numpy()).all() and np.isnan(dv.cpu().numpy()).all()
    else:
        check(device, dtype, rtol, atol, arrays, g, make(rng, (L, S)), causal)


def test_forward_splits_a_head_over_threads_as_one_thread(rng):
    """One head and two threads: the forward splits its query rows; the bits equal one thread's."""
    arrays = [make(rng, (1, 700, 16), np.float32) for _ in range(3)]
    threads = fg.get_num_threads()
    try:
        outs = []
        for n in (1, 2):
            fg.set_num_threads(n)
            outs.append(F.scaled_dot_product_attention(*(fg.tensor(a) for a in arrays), is_causal=True).numpy())
    finally:
        fg.set_num_threads(threads)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], numpy_attention(*(a.astype(np.float64) for a in arrays), causal=True),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.slow_to_emulate
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(rng, device, causal):
    """float64 finite differences over a head of 190 queries and keys (two backward chunks)."""
    if device != "cpu":
        pytest.skip("float64 takes the composite on cuda; the other tests check the kernels there")

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    gradcheck(fn, make(rng, (1, 190, 2)), make(rng, (1, 190, 2)), make(rng, (1, 190, 2)))
