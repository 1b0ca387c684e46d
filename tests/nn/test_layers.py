"""Layers against NumPy formulas, module-level float64 gradchecks, init statistics, Checkpoint."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


def f64(a):
    return fg.tensor(a, dtype=fg.float64)


def to_f64(module):
    with fg.no_grad():
        for name, p in module.named_parameters():
            *path, leaf = name.split(".")
            owner = module
            for part in path:
                owner = owner[int(part)] if part.isdigit() else getattr(owner, part)
            setattr(owner, leaf, nn.Parameter(p.double()))
    return module


def module_gradcheck(module, *inputs):
    module = to_f64(module)
    params = module.parameters()

    # gradients w.r.t. the inputs through the module
    assert fg.testing.gradcheck(lambda *xs: module(*xs) if not isinstance(module(*xs), tuple) else module(*xs)[0],
                                [f64(x).requires_grad_() for x in inputs])
    # gradients w.r.t. each parameter
    for p in params:
        base = p.detach().numpy().copy()
        x = [f64(a) for a in inputs]
        out = module(*x)
        out = out[0] if isinstance(out, tuple) else out
        proj = np.random.default_rng(0).standard_normal(out.shape)
        module.zero_grad()
        (out * f64(proj)).sum().backward()
        analytic = p.grad.numpy().copy()
        p.grad = None
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            for sign in (1, -1):
                v = base.copy()
                v[idx] += sign * 1e-6
                with fg.no_grad():
                    p.copy_(f64(v))
                o = module(*x)
                o = o[0] if isinstance(o, tuple) else o
                numeric[idx] += sign * (o.numpy() * proj).sum() / 2e-6
        with fg.no_grad():
            p.copy_(f64(base))
        np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-6)


def test_linear_matches_formula_and_default_init(rng):
    fg.manual_seed(0)
    m = nn.Linear(300, 50)
    w, b = m.weight.numpy(), m.bias.numpy()
    bound = 1 / np.sqrt(300)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    x = rng.standard_normal((7, 300)).astype(np.float32)
    fg.testing.assert_close(m(fg.tensor(x)), x @ w.T + b, rtol=1e-5, atol=1e-5)
    assert nn.Linear(3, 2, bias=False).bias is None
    module_gradcheck(nn.Linear(3, 2), rng.standard_normal((4, 3)))


def test_same_seed_same_weights():
    fg.manual_seed(42)
    a = nn.Linear(5, 5).weight.numpy().copy()
    fg.manual_seed(42)
    np.testing.assert_array_equal(nn.Linear(5, 5).weight.numpy(), a)


def test_embedding_layernorm_rmsnorm(rng):
    e = nn.Embedding(10, 3)
    idx = np.array([[1, 9], [0, 1]])
    fg.testing.assert_close(e(fg.tensor(idx)), e.weight.numpy()[idx])
    ln = nn.LayerNorm(6)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    fg.testing.assert_close(ln(fg.tensor(x)), expected, rtol=1e-4, atol=1e-5)
    rms = nn.RMSNorm((6,))
    fg.testing.assert_close(rms(fg.tensor(x)), x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6), rtol=1e-4, atol=1e-5)
    assert isinstance(rms, nn.RMSNorm) and isinstance(rms, nn.LayerNorm)
    module_gradcheck(nn.LayerNorm(4), rng.standard_normal((3, 4)))
    module_gradcheck(nn.RMSNorm(4), rng.standard_normal((3, 4)))


def test_conv_pool_flatten_activations(rng):
    conv = nn.Conv2d(2, 3, 3, stride=1, padding=1)
    x = rng.standard_normal((1, 2, 5, 5))
    y = conv(fg.tensor(x.astype(np.float32)))
    assert y.shape == (1, 3, 5, 5)
    fg.testing.assert_close(y, fg.nn.functional.conv2d(fg.tensor(x.astype(np.float32)), conv.weight, conv.bias, padding=1))
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 3),
                          nn.GELU(), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.Softmax(-1), nn.Identity())
    out = model(fg.randn(4, 1, 6, 6))
    assert out.shape == (4, 3)
    fg.testing.assert_close(out.sum(-1), np.ones(4, np.float32), rtol=1e-5, atol=1e-5)
    assert isinstance(model[1], nn.ReLU) and "kernel_size=2, stride=2" in repr(model[2])
    pooled = nn.AvgPool2d(2)(fg.ones(1, 1, 4, 4))
    assert pooled.shape == (1, 1, 2, 2) and pooled.sum().item() == 4
    module_gradcheck(nn.Conv2d(1, 2, 2), rng.standard_normal((1, 1, 3, 3)))


def test_dropout_module_respects_mode():
    d = nn.Dropout(0.5)
    x = fg.ones(1000)
    assert (d(x).numpy() == 0).mean() > 0.4
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), np.ones(1000))
    with pytest.raises(fg.InvalidArgumentError, match="Dropout: p must be in"):
        nn.Dropout(2.0)


def np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_multihead_attention_matches_numpy(rng):
    m = nn.MultiheadAttention(8, 2, causal=True)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    w, b = m.qkv.weight.numpy(), m.qkv.bias.numpy()
    q, k, v = np.split(x @ w.T + b, 3, -1)
    heads = lambda t: t.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3)
    q, k, v = heads(q), heads(k), heads(v)
    s = q @ k.transpose(0, 1, 3, 2) / 2.0
    s = np.where(np.triu(np.ones((5, 5), bool), 1), -np.inf, s)
    o = (np_softmax(s) @ v).transpose(0, 2, 1, 3).reshape(2, 5, 8)
    expected = o @ m.proj.weight.numpy().T + m.proj.bias.numpy()
    fg.testing.assert_close(m(fg.tensor(x)), expected, rtol=1e-4, atol=1e-5)
    cross = m(fg.tensor(x), fg.tensor(x), fg.tensor(x))
    assert cross.shape == (2, 5, 8)
    module_gradcheck(nn.MultiheadAttention(4, 2, causal=True), rng.standard_normal((1, 3, 4)))


def test_transformer_block(rng):
    blk = nn.TransformerBlock(8, 2)
    x = fg.tensor(rng.standard_normal((2, 6, 8)).astype(np.float32))
    y = blk(x)
    assert y.shape == (2, 6, 8)
    # causal: changing the last token leaves earlier outputs unchanged
    x2 = x.numpy().copy()
    x2[:, -1] += 1
    np.testing.assert_allclose(blk(fg.tensor(x2)).numpy()[:, :-1], y.numpy()[:, :-1], rtol=1e-5, atol=1e-6)
    assert [n for n, _ in blk.named_children()] == ["ln1", "attn", "ln2", "fc1", "fc2"]


def sig(a):
    return 1 / (1 + np.exp(-a))


def test_gru_and_lstm_cells_match_formulas(rng):
    gru = nn.GRUCell(3, 4)
    x, h = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    gi = x @ gru.weight_ih.numpy().T + gru.bias_ih.numpy()
    gh = h @ gru.weight_hh.numpy().T + gru.bias_hh.numpy()
    r, z = sig(gi[:, :4] + gh[:, :4]), sig(gi[:, 4:8] + gh[:, 4:8])
    n = np.tanh(gi[:, 8:] + r * gh[:, 8:])
    fg.testing.assert_close(gru(fg.tensor(x), fg.tensor(h)), (1 - z) * n + z * h, rtol=1e-5, atol=1e-6)
    assert gru(fg.tensor(x)).shape == (2, 4)  # h defaults to zeros
    lstm = nn.LSTMCell(3, 4)
    c = rng.standard_normal((2, 4)).astype(np.float32)
    g = x @ lstm.weight_ih.numpy().T + lstm.bias_ih.numpy() + h @ lstm.weight_hh.numpy().T + lstm.bias_hh.numpy()
    i, f, gg, o = sig(g[:, :4]), sig(g[:, 4:8]), np.tanh(g[:, 8:12]), sig(g[:, 12:])
    c2 = f * c + i * gg
    h2, c2_out = lstm(fg.tensor(x), (fg.tensor(h), fg.tensor(c)))
    fg.testing.assert_close(c2_out, c2, rtol=1e-5, atol=1e-6)
    fg.testing.assert_close(h2, o * np.tanh(c2), rtol=1e-5, atol=1e-6)
    module_gradcheck(nn.GRUCell(2, 3), rng.standard_normal((1, 2)), rng.standard_normal((1, 3)))


def test_attention_rejects_an_empty_embedding():
    with pytest.raises(fg.InvalidArgumentError, match="MultiheadAttention: dim 0 must be a positive multiple of heads 7"):
        nn.MultiheadAttention(0, 7)


@pytest.mark.parametrize("cell", [nn.GRUCell, nn.LSTMCell])
def test_recurrent_cells_reject_empty_hidden_state(cell):
    with pytest.raises(fg.InvalidArgumentError, match=cell.__name__ + ": input_size must be >= 0 and hidden_size > 0, got 3 and 0"):
        cell(3, 0)
    with pytest.raises(fg.InvalidArgumentError, match="got -1 and 2"):
        cell(-1, 2)


def test_init_functions_statistics():
    fg.manual_seed(1)
    w = fg.empty(400, 300)
    nn.init.kaiming_uniform_(w, nonlinearity="relu")
    bound = np.sqrt(2.0) * np.sqrt(3.0 / 300)
    assert abs(np.abs(w.numpy()).max() - bound) < 0.01 * bound
    nn.init.xavier_normal_(w)
    assert abs(w.numpy().std() - np.sqrt(2.0 / 700)) < 0.01 * np.sqrt(2.0 / 700)
    nn.init.kaiming_normal_(w, mode="fan_out")
    assert abs(w.numpy().std() - np.sqrt(2.0 / (1.01 * 400))) < 0.02 * np.sqrt(2.0 / 400)
    nn.init.xavier_uniform_(w, gain=2.0)
    assert np.abs(w.numpy()).max() <= 2.0 * np.sqrt(6 / 700)
    nn.init.normal_(w, 3.0, 0.5)
    assert abs(w.numpy().mean() - 3) < 0.01
    nn.init.uniform_(w, -1, 1)
    assert w.numpy().min() >= -1 and w.numpy().max() < 1
    nn.init.zeros_(w)
    assert w.sum().item() == 0
    nn.init.ones_(w)
    assert w.sum().item() == 120000
    p = nn.Linear(3, 3).weight
    nn.init.constant_(p, 2.0)  # parameters initialise in place without a no_grad block
    assert p.sum().item() == 18
    assert abs(nn.init.calculate_gain("tanh") - 5 / 3) < 1e-12
    with pytest.raises(fg.ShapeError, match="fan in and fan out need a tensor of at least 2 dims"):
        nn.init.xavier_uniform_(fg.empty(3))


def test_checkpoint_same_outputs_and_gradients_and_saves_memory(rng):
    fg.manual_seed(3)
    body = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Dropout(0.2)) for _ in range(6)])
    x = fg.tensor(rng.standard_normal((256, 256)).astype(np.float32), requires_grad=True)

    def run(module):
        fg.manual_seed(9)
        for p in body.parameters():
            p.grad = None
        x.grad = None
        before = fg.cpu_memory_stats()["allocated"]
        out = module(x)
        held = fg.cpu_memory_stats()["allocated"] - before
        out.sum().backward()
        return out.numpy().copy(), x.grad.numpy().copy(), [p.grad.numpy().copy() for p in body.parameters()], held

    plain = run(body)
    ckpt = run(nn.Checkpoint(body))
    np.testing.assert_array_equal(plain[0], ckpt[0])  # dropout masks replay exactly
    np.testing.assert_allclose(plain[1], ckpt[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(plain[2], ckpt[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ckpt[3] < plain[3] / 4, f"checkpoint kept {ckpt[3]} bytes vs {plain[3]} without it"


class _FailsOnRecompute(nn.Module):
    """Dropout then a Linear; its second forward (Checkpoint's recomputation in backward) raises."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.drop(x)  # draws random numbers before failing
        if self.calls == 2:
            raise ValueError("recomputation failed")
        return self.fc(h)


@pytest.mark.parametrize("grad_mode", [True, False])
def test_checkpoint_recomputation_that_raises_leaves_grad_mode_and_rng_as_they_were(grad_mode):
    fg.manual_seed(5)
    inner = _FailsOnRecompute()
    x = fg.tensor(np.ones((8, 4), np.float32), requires_grad=True)
    loss = nn.Checkpoint(inner)(x).sum()
    fg.rand((3,))  # the global generator moves on after the forward
    rng = fg.get_rng_state()
    with fg.set_grad_enabled(grad_mode):
        with pytest.raises(ValueError, match="recomputation failed"):
            loss.backward()
        assert fg.is_grad_enabled() is grad_mode
    assert inner.calls == 2
    assert fg.get_rng_state() == rng  # not rewound to the forward's state
    assert fg.is_grad_enabled()
