"""The fuse_add_norm pass: in a pre-norm transformer each residual add and the layer_norm of its sum
become one add_layer_norm call, and each layer_norm backward accumulates the residual's gradient
(norm_backward with accumulate) instead of a separate add; the compiled step trains as the plan
without the pass (FLOWGRAD_PLAN_SKIP=fuse_add_norm) and as eager mode."""
import numpy as np

import flowgrad as fg
from test_fuse_epilogues import assert_trains_alike

F = fg.nn.functional
VOCAB, T, D, HEADS, LAYERS, BATCH = 11, 8, 16, 2, 2, 3


def language_model(device):
    fg.manual_seed(5)

    class LM(fg.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = fg.nn.Embedding(VOCAB, D)
            self.blocks = fg.nn.ModuleList([fg.nn.TransformerBlock(D, HEADS, causal=True) for _ in range(LAYERS)])
            self.norm = fg.nn.LayerNorm(D)
            self.head = fg.nn.Linear(D, VOCAB)

        def forward(self, idx):
            x = self.tokens(idx)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x)).reshape(-1, VOCAB)

    return LM().to(device)


def batch(device):
    rng = np.random.default_rng(2)
    return (fg.tensor(rng.integers(0, VOCAB, (BATCH, T))).to(device),
            fg.tensor(rng.integers(0, VOCAB, BATCH * T)).to(device))


def compiled(device):
    model = language_model(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    return model, fg.compile(model, F.cross_entropy, opt, example_inputs=batch(device))


def ops(step, phase):
    return [r["op"] for r in step.explain().rows if r["phase"] == phase]


def test_transformer_trains_like_the_unfused_plan_and_eager(device, monkeypatch):
    x, y = batch(device)
    model, fused = compiled(device)
    # per block: the attention's residual add feeds ln2, the MLP's the next ln1 or the final norm
    assert ops(fused, "forward").count("add_layer_norm") == 2 * LAYERS
    assert ops(fused, "forward").count("layer_norm") == 1  # the first block's ln1 reads the embedding
    accumulating = [r for r in fused.ir() if r["op"] == "norm_backward" and "accumulate=1" in r["attrs"]]
    assert len(accumulating) == 2 * LAYERS
    counts = {name: (before, after) for name, before, after in fused.plan.passes()}
    assert counts["fuse add norm"][0] - counts["fuse add norm"][1] == 4 * LAYERS

    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", "fuse_add_norm")
    plain_model, plain = compiled(device)
    assert "add_layer_norm" not in ops(plain, "forward")
    assert not [r for r in plain.ir() if r["op"] == "norm_backward" and "accumulate=1" in r["attrs"]]

    assert_trains_alike((model, fused), (plain_model, plain), language_model(device), F.cross_entropy, x, y, lr=0.1,
                        rtol=1e-5)


def test_a_sum_read_elsewhere_stays_an_output_and_a_broadcast_add_is_left_alone(device):
    rng = np.random.default_rng(4)
    fg.manual_seed(1)
    norm = fg.nn.LayerNorm(13).to(device)
    x, r, g = (fg.tensor(rng.normal(size=(5, 7, 13)).astype(np.float32)).to(device) for _ in range(3))
    row = fg.tensor(rng.normal(size=(13,)).astype(np.float32)).to(device)

    def loss(a, b, weights):
        s = a + b
        return ((norm(s) + s * 0.5 + norm(a + row)) * weights).sum()

    step = fg.compile(loss, example_inputs=(x, r, g))
    forward = ops(step, "forward")
    assert forward.count("add_layer_norm") == 1 and forward.count("layer_norm") == 1, forward
    np.testing.assert_allclose(step(x, r, g).item(), loss(x, r, g).item(), rtol=1e-5)
