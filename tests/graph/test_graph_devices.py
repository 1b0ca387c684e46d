"""Every FlowBuilder construct on every device: the same graph run on the CPU, then moved with
Module.to(device) and run again, gives the same outputs and gradients. On cuda, level-parallel
branches run on CUDA streams of their own (forked and joined with events), which once failed
with `cuBLAS gemm failed with status 14` when pool threads shared one cuBLAS handle."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn


class Halt(nn.Module):
    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        return x.abs().mean() - self.threshold


def split_merge():
    return (fg.flow(nn.Linear(6, 8)).tag("enc")
            .split(nn.Linear(8, 5), nn.Sequential(nn.Linear(8, 5), nn.GELU()), nn.Linear(8, 5))
            .tag_group("head").merge(fg.flow.Add()).through(nn.Linear(5, 3)).tag("out").build())


def gate():
    return fg.flow(nn.Linear(6, 6)).gate(fg.flow.SoftmaxRouter(6, 2), nn.Linear(6, 4), nn.Linear(6, 4)).build()


def switch():
    return (fg.flow(nn.Linear(6, 6)).switch(fg.flow.ArgmaxSelector(6, 2), nn.Linear(6, 4), nn.Linear(6, 4))
            .build())


def loops():
    return (fg.flow(nn.Linear(6, 6)).loop(nn.Sequential(nn.Linear(6, 6), nn.Tanh())).for_(3)
            .loop(nn.Linear(6, 6)).until(Halt(0.05), 4).tag("u").build())


def residual():
    return fg.flow(nn.Linear(6, 6)).also(nn.Linear(6, 6)).tag("h").through(nn.Linear(6, 2)).using("h").build()


CONSTRUCTS = {"split_merge": split_merge, "gate": gate, "switch": switch, "loops": loops,
              "residual": residual}


def run(g, x):
    g.zero_grad()
    out = g(x)
    out.square().sum().backward()
    return out.numpy().copy(), [p.grad.numpy().copy() if p.grad is not None else None for p in g.parameters()]


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_construct_matches_the_cpu(device, name, parallel):
    if device == "cpu":
        pytest.skip("compares a device against the CPU reference (tests/graph/test_constructs.py checks the CPU)")
    fg.manual_seed(3)
    g = CONSTRUCTS[name]()
    g.parallel = parallel
    x_np = np.random.default_rng(1).normal(size=(7, 6)).astype(np.float32)
    ref_out, ref_grads = run(g, fg.tensor(x_np))
    g.to(device)
    out, grads = run(g, fg.tensor(x_np, device=device))
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads, ref_grads):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_tagged_values_and_collect_stay_on_the_device(device):
    fg.manual_seed(0)
    g = split_merge().to(device)
    seen = []
    for i in range(4):
        g(fg.randn(5, 6, device=device))
        assert str(g.tagged("out").device).startswith(device)
        seen.append(float(g.tagged("out").mean().item()))
        g.collect("out", "head")
    np.testing.assert_allclose(g.collected("out"), seen, rtol=1e-5)
    flushed = g.flush()
    assert flushed["out"] == pytest.approx(np.mean(seen), rel=1e-5)
    assert len(g.trends("head")) == 3


def test_training_a_split_graph_on_the_device_lowers_the_loss(device):
    fg.manual_seed(0)
    g = split_merge().to(device)
    opt = fg.optim.Adam(g.parameters(), lr=1e-2)
    x = fg.randn(32, 6, device=device)
    y = fg.randn(32, 3, device=device)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = fg.nn.functional.mse_loss(g(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    assert losses[-1] < 0.7 * losses[0]


def test_graph_checkpoint_round_trip_on_the_device(device, tmp_path):
    fg.manual_seed(0)
    g = split_merge().to(device)
    x = fg.randn(4, 6, device=device)
    want = g(x).numpy()
    g.record("loss", 0.5)
    g.flush()
    path = tmp_path / "g.safetensors"
    fg.save_checkpoint(path, g, graph=g, step=1)
    fg.manual_seed(1)
    h = split_merge().to(device)
    meta = fg.load_checkpoint(path, h, graph=h)
    assert meta["step"] == 1 and h.trend("loss").values() == [0.5]
    np.testing.assert_allclose(h(x).numpy(), want, rtol=1e-6)
