"""MultiheadAttention's self-attention on the CPU: one flash_attention_packed op reads q, k, v out of
the packed projection and writes their gradient into one buffer. Checked against the same module
computed with public ops on contiguous heads (the composite), float64, and in a compiled step:
no contiguous copies and no slice_backward of the qkv split."""
import collections

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from tests.conftest import make

F = fg.nn.functional


def reference(m, x, mask=None):
    """m(x) from public ops: split, contiguous heads, the composite attention, merged heads."""
    b, t, d = x.shape
    h, causal = m.heads_, m.causal_
    qkv = F.linear(x, m.qkv.weight, m.qkv.bias)
    q, k, v = (p.reshape(b, t, h, d // h).transpose(1, 2).contiguous() for p in qkv.chunk(3, -1))
    o = F.scaled_dot_product_attention_reference(q, k, v, attn_mask=mask, is_causal=causal)
    return F.linear(o.transpose(1, 2).reshape(b, t, d), m.proj.weight, m.proj.bias)


def float64_module(heads, causal, dim=12):
    m = nn.MultiheadAttention(dim, heads, causal=causal)
    m.heads_, m.causal_ = heads, causal
    with fg.no_grad():
        for layer in (m.qkv, m.proj):
            layer.weight, layer.bias = nn.Parameter(layer.weight.double()), nn.Parameter(layer.bias.double())
    return m


@pytest.mark.parametrize("T", [1, 7, 64, 65])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [None, "bool", "additive"])
def test_matches_the_composite_with_gradients(rng, T, causal, mask):
    m = float64_module(3, causal)
    x = fg.tensor(make(rng, (2, T, 12)), dtype=fg.float64, requires_grad=True)
    tm = None
    if mask == "bool":
        keep = make(rng, (T, T), np.bool_)
        keep[:, 0] = True
        tm = fg.tensor(keep)
    elif mask == "additive":
        tm = fg.tensor(make(rng, (1, T, T)), dtype=fg.float64)
    got = m(x, tm) if tm is not None else m(x)
    want = reference(m, x, tm)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    g = fg.tensor(make(rng, got.shape), dtype=fg.float64)
    wrt = [x] + list(m.parameters())
    for a, b in zip(fg.autograd.grad((got * g).sum(), wrt), fg.autograd.grad((want * g).sum(), wrt)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_gradcheck_of_the_input(rng):
    m = float64_module(2, True, dim=4)
    assert fg.testing.gradcheck(m, [fg.tensor(make(rng, (2, 3, 4)), dtype=fg.float64, requires_grad=True)])


def test_second_order(rng):
    """create_graph: the packed op's gradient is rebuilt from public ops, differentiable again."""
    m = float64_module(2, True, dim=8)
    x = fg.tensor(make(rng, (1, 5, 8)), dtype=fg.float64, requires_grad=True)
    results = []
    for out in (m(x), reference(m, x)):
        (g,) = fg.autograd.grad((out * out).sum(), [x], create_graph=True)
        (gg,) = fg.autograd.grad((g * g).sum(), [x])
        results.append((g.numpy(), gg.numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_fully_masked_row_is_nan_like_the_composite(rng):
    m = float64_module(2, False, dim=8)
    x = fg.tensor(make(rng, (1, 4, 8)), dtype=fg.float64)
    keep = np.ones((4, 4), bool)
    keep[1] = False
    out, want = m(x, fg.tensor(keep)).numpy(), reference(m, x, fg.tensor(keep)).numpy()
    assert np.isnan(out[:, 1]).all() and np.isnan(want[:, 1]).all()
    np.testing.assert_allclose(np.delete(out, 1, 1), np.delete(want, 1, 1), rtol=1e-10, atol=1e-12)


def test_mask_that_wants_a_gradient_takes_the_composite(rng):
    m = float64_module(2, False, dim=8)
    x = fg.tensor(make(rng, (1, 4, 8)), dtype=fg.float64)
    bias = fg.tensor(make(rng, (4, 4)), dtype=fg.float64, requires_grad=True)
    m(x, bias).sum().backward()
    want = fg.autograd.grad(reference(m, x, bias).sum(), [bias])[0]
    np.testing.assert_allclose(bias.grad.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_compiled_step_copies_no_heads(rng):
    """A traced training step of a transformer block: the qkv split feeds the fused op in place
    (no contiguous, no slice_backward), and the projection's gradient comes out of one op."""
    fg.manual_seed(0)
    model = nn.Sequential(nn.TransformerBlock(16, 4, causal=True), nn.Linear(16, 5))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(out, y):
        return F.cross_entropy(out.reshape(-1, 5), y)

    x = fg.tensor(make(rng, (2, 8, 16)).astype(np.float32))
    y = fg.tensor(rng.integers(0, 5, 16))
    step = fg.compile(model, loss_fn, opt, example_inputs=(x, y))
    ops = collections.Counter(r["op"] for r in step.ir())
    assert ops["flash_attention_packed"] == 1 and ops["flash_attention_packed_backward"] == 1
    assert ops["contiguous"] == 0 and ops["slice_backward"] == 0
    first = float(step(x, y))
    for _ in range(5):
        last = float(step(x, y))
    assert last < first
