"""Every optimisation pass runs inside switch and loop blocks too: a block's constants are folded,
a switch block's x @ w.t() gets its weight gradient's transposed copy folded into the matmul, and a
block's elementwise chain becomes a fused run, with results equal to eager and to a build that
skips those passes."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

ROWS, WIDTH = 256, 64  # a block's activations have 16384 elements: the CPU fuses them


class Chain(nn.Module):
    """A same-shape elementwise chain (one fused run when fusion is on) scaled by a constant made
    in the block (folded when constant folding is on)."""

    def forward(self, h):
        scale = (fg.arange(0.0, WIDTH * 0.01, 0.01) * 0.5).exp()
        return ((h.tanh() * 0.5 + h.sigmoid()) * h * scale).relu()


class MatmulTransposed(nn.Module):
    """x @ w.t(): its weight gradient is a matmul copied out transposed (nn.Linear's linear op
    reads the weight in place and makes no such copy)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fg.randn(WIDTH, WIDTH) * 0.1)

    def forward(self, h):
        return h @ self.w.t()


def block():
    return nn.Sequential(MatmulTransposed(), Chain())


def graph(kind):
    b = fg.FlowBuilder(nn.Linear(WIDTH, WIDTH))
    if kind == "switch":
        b = b.switch(fg.flow.ArgmaxSelector(WIDTH, 2), block(), nn.Linear(WIDTH, WIDTH))
    else:
        b = b.loop(block()).while_(fg.flow.ThresholdHalt(0.05), 3)
    return b.through(nn.Linear(WIDTH, 3)).build()


def batches(n=4):
    rng = np.random.default_rng(3)
    xs = [fg.tensor((rng.standard_normal((ROWS, WIDTH)) + rng.uniform(-1, 1)).astype(np.float32)) for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 3, ROWS)) for _ in range(n)]
    return xs, ys


def block_rows(records):
    """Every record inside a region's blocks, at any depth."""
    out = []
    for r in records:
        if r["branch"] is not None:
            for b in r["branch"]["blocks"]:
                out += b + block_rows(b)
    return out


def train(kind, compiled):
    xs, ys = batches()
    fg.manual_seed(0)
    g = graph(kind)
    opt = fg.optim.SGD(g.parameters(), lr=0.05)
    if not compiled:
        losses = []
        for x, y in zip(xs, ys):
            opt.zero_grad()
            loss = F.cross_entropy(g(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, g, None
    step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    return [step(x, y).item() for x, y in zip(xs, ys)], g, step


@pytest.mark.parametrize("kind", ["switch", "while"])
def test_blocks_get_every_pass_with_eager_results(kind, monkeypatch):
    eager, g_eager, _ = train(kind, compiled=False)
    losses, g, step = train(kind, compiled=True)
    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", "constant_folding,transpose_folding,fusion")
    skipped, g_skipped, plain = train(kind, compiled=True)
    np.testing.assert_allclose(losses, eager, rtol=1e-5)
    np.testing.assert_allclose(losses, skipped, rtol=1e-5)
    for (name, p), q, r in zip(g.named_parameters(), g_eager.parameters(), g_skipped.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(p.numpy(), r.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    inner, inner_plain = block_rows(step.ir()), block_rows(plain.ir())
    assert any(r["run"] is not None for r in inner), "no fused run inside a block"
    assert all(r["run"] is None for r in inner_plain)
    assert not any(r["op"] == "arange" for r in inner) and any(r["op"] == "arange" for r in inner_plain)
    assert step.stats["constants_folded"] >= 3 and plain.stats["constants_folded"] == 0
    if kind == "switch":  # a loop's backward accumulates its weight gradient: no copy to fold
        copies = sum(r["op"] == "contiguous" for r in inner)
        copies_plain = sum(r["op"] == "contiguous" for r in inner_plain)
        assert copies < copies_plain, (copies, copies_plain)  # a block's weight-gradient copy was folded
        assert step.stats["transposes_folded"] > plain.stats["transposes_folded"] == 0
    assert step.stats["fused"] > 0 and plain.stats["fused"] == 0
    step.plan.check_memory()


@pytest.mark.parametrize("kind", ["switch", "while"])
def test_fused_runs_in_blocks_keep_results_under_debug_poisoning(kind, monkeypatch):
    reference, _, _ = train(kind, compiled=True)
    monkeypatch.setenv("FLOWGRAD_DEBUG_PLAN", "1")
    poisoned, _, step = train(kind, compiled=True)
    assert poisoned == reference
    assert step.stats["poisoned_bytes"] > 0 and step.stats["fused_runs"] >= 1
