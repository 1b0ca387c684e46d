"""matmul_pair, the op only the plan pass pair_gemms makes: a linear's input and weight gradients
(two independent products side by side) in one call that runs both at once on the CPU pool. Checked
against float64 NumPy through compiled steps, on one and two threads, and a transformer trains as the
plan without the pass (FLOWGRAD_PLAN_SKIP=pair_gemms) and as eager mode."""
import numpy as np
import pytest

import flowgrad as fg

nn = fg.nn
F = fg.nn.functional


def ops(step):
    return [r["op"] for r in step.ir()]


def two_linears(k, hidden, n, dtype, device):
    fg.manual_seed(3)
    first, second = nn.Linear(k, hidden), nn.Linear(hidden, n)
    if dtype == "float64":
        for layer in (first, second):
            layer.weight, layer.bias = nn.Parameter(layer.weight.double()), nn.Parameter(layer.bias.double())
    return nn.Sequential(first, nn.Tanh(), second).to(device)


def numpy_gradients(model, x, r):
    """Gradients of sum(model(x) * r) in float64, written out: the second linear's input gradient
    and weight gradient are the pair."""
    w1, b1, w2, b2 = (p.cpu().numpy().astype(np.float64) for p in model.parameters())
    a = np.tanh(x @ w1.T + b1)
    dy = r
    da = dy @ w2
    dh = da * (1 - a * a)
    return [dh.T @ x, dh.sum(0), dy.T @ a, dy.sum(0)]


# (600, 40, 64, 48): the weight gradient's K (600) is long enough for the AVX-512 GEMM to split it
# over the threads, so the pair runs one product after the other.
@pytest.mark.parametrize("shape", [(37, 45, 33, 20), (1, 1, 1, 1), (200, 9, 64, 3), (130, 128, 384, 96), (600, 40, 64, 48)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_gradients_match_numpy(shape, dtype, threads, device, restore_threads):
    fg.set_num_threads(threads)
    batch, k, hidden, n = shape
    rng = np.random.default_rng(7)
    x_np, r_np = (rng.standard_normal(s).astype(dtype) for s in ((batch, k), (batch, n)))
    model = two_linears(k, hidden, n, dtype, device)
    x, r = (fg.tensor(v, device=device) for v in (x_np, r_np))
    step = fg.compile(model, lambda out, weights: (out * weights).sum(), None, example_inputs=(x, r))
    expected = numpy_gradients(model, x_np.astype(np.float64), r_np.astype(np.float64))
    step(x, r)
    assert ops(step).count("matmul_pair") == (1 if device == "cpu" else 0)
    tol = 1e-10 if dtype == "float64" else 2e-4
    for p, want in zip(model.parameters(), expected):
        np.testing.assert_allclose(p.grad.cpu().numpy(), want, rtol=tol, atol=tol * np.sqrt(max(batch, hidden)))


def test_a_product_reading_the_other_ones_result_is_not_paired():
    """(x @ w) @ v: the second product reads the first's result, so the two stay apart."""
    rng = np.random.default_rng(1)
    x, w, v = (fg.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((8, 5), (5, 6), (6, 3)))
    step = fg.compile(lambda a: (a @ w @ v).sum(), example_inputs=(x,))
    assert "matmul_pair" not in ops(step)
    np.testing.assert_allclose(step(x).item(), (x.numpy() @ w.numpy() @ v.numpy()).sum(), rtol=1e-5)


def language_model(device):
    fg.manual_seed(5)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(11, 16)
            self.blocks = nn.ModuleList([nn.TransformerBlock(16, 2, causal=True) for _ in range(2)])
            self.norm = nn.LayerNorm(16)
            self.head = nn.Linear(16, 11)

        def forward(self, idx):
            x = self.tokens(idx)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)).reshape(-1, 11)

    return LM().to(device)


def test_transformer_trains_like_the_unpaired_plan_and_eager(device, monkeypatch, restore_threads):
    fg.set_num_threads(2)
    rng = np.random.default_rng(2)
    x, y = fg.tensor(rng.integers(0, 11, (3, 8))).to(device), fg.tensor(rng.integers(0, 11, 24)).to(device)

    def compiled():
        model = language_model(device)
        return model, fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, y))
    model, paired = compiled()
    # every linear's backward: its input gradient beside its weight gradient (4 linears a block, the head)
    assert ops(paired).count("matmul_pair") == (4 * 2 + 1 if device == "cpu" else 0)
    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", "pair_gemms")
    plain_model, plain = compiled()
    assert "matmul_pair" not in ops(plain)
    eager = language_model(device)
    opt = fg.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(3):
        loss = F.cross_entropy(eager(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        a, b = paired(x, y).item(), plain(x, y).item()
        np.testing.assert_allclose(a, b, rtol=1e-6)
        np.testing.assert_allclose(a, loss.item(), rtol=1e-5)
    for (name, p), q, r in zip(model.named_parameters(), plain_model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.cpu().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(p.cpu().numpy(), r.cpu().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
