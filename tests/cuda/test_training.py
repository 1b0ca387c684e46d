"""A small regression model trains the same on every device: Linear/ReLU/Tanh, mse_loss,
SGD with momentum and AdamW, clip_grad_norm_ (the cuda case runs where a GPU is visible)."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn

F = fg.nn.functional


def train(device, make_optimizer, steps=5):
    fg.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
    opt = make_optimizer(model.parameters())
    rng = np.random.default_rng(0)
    x = fg.tensor(rng.normal(size=(32, 6)).astype(np.float32)).to(device)
    y = fg.tensor(rng.normal(size=(32, 1)).astype(np.float32)).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        fg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses, [p.cpu().numpy() for p in model.parameters()]


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: fg.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: fg.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)], ids=["sgd", "adamw"])
def test_training_matches_the_cpu(make_optimizer, device):
    losses, params = train(device, make_optimizer)
    ref_losses, ref_params = train("cpu", make_optimizer)
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-6)
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p, r, rtol=1e-4, atol=1e-5)


def test_transformer_block_matches_the_cpu(device):
    fg.manual_seed(1)
    block = nn.TransformerBlock(32, 4, causal=True)
    x = fg.randn(2, 9, 32)
    want = block(x)
    want.square().mean().backward()
    want_grads = [p.grad.numpy().copy() for p in block.parameters()]
    block.zero_grad()
    block.to(device)
    got = block(x.to(device))
    got.square().mean().backward()
    fg.testing.assert_close(got, want.detach().numpy(), rtol=1e-4, atol=1e-5)
    for p, g in zip(block.parameters(), want_grads):
        np.testing.assert_allclose(p.grad.cpu().numpy(), g, rtol=1e-3, atol=1e-5)
