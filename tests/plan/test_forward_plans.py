"""fg.compile(fn_or_module, example_inputs=...) without loss_fn and optimizer for a step that does not return
a loss: a ForwardPlan returning any structure of tensors, with in-place writes into buffers kept across calls."""
import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from flowgrad.compile import CompiledStep

F = fg.nn.functional


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.a, self.b = nn.Linear(8, 3), nn.Linear(8, 2)

    def forward(self, x):
        h = self.body(x).relu()
        return self.a(h), {"b": self.b(h), "both": [h.sum(-1), h.argmax(-1)]}


def test_a_module_returning_logits_compiles_to_a_forward_plan_with_its_structure(rng):
    model = TwoHeads()
    x = fg.tensor(rng.standard_normal((4, 5)).astype(np.float32))
    plan = fg.compile(model, example_inputs=(x,))  # trainable parameters, grad mode on: still a forward plan
    assert isinstance(plan, fg.ForwardPlan)
    for _ in range(2):
        x = fg.tensor(rng.standard_normal((4, 5)).astype(np.float32))
        got, want = plan(x), model(x)
        assert isinstance(got, tuple) and isinstance(got[1], dict) and isinstance(got[1]["both"], list)
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got[1]["b"].numpy(), want[1]["b"].numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got[1]["both"][0].numpy(), want[1]["both"][0].numpy(), rtol=1e-5)
        assert got[1]["both"][1].tolist() == want[1]["both"][1].tolist()
        assert got[0].grad_fn is None
    assert all(p.grad is None for p in model.parameters())  # no gradients computed or bound
    with fg.no_grad():  # training is seen at once: the plan reads the parameters in place
        model.a.bias.add_(1.0)
    np.testing.assert_allclose(plan(x)[0].numpy(), model(x)[0].detach().numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(fg.ShapeError):
        plan(fg.zeros(3, 5))


def test_a_function_with_a_closed_over_counter_keeps_its_writes():
    total = fg.zeros(2)
    calls = fg.zeros(1, dtype=fg.int64)

    def step(x):
        total.add_(x)
        calls.add_(1)
        return total * 2, calls + 0

    plan = fg.compile(step, example_inputs=(fg.ones(2),))
    assert total.tolist() == [0, 0]  # compiling made no write
    for i in range(1, 4):
        doubled, count = plan(fg.tensor([1.0, 2.0]))
        assert doubled.tolist() == [2.0 * i, 4.0 * i] and count.tolist() == [i]
    assert total.tolist() == [3.0, 6.0] and calls.tolist() == [3]


class SumOfLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x):
        return self.fc(x).sum()


def test_loss_steps_keep_their_training_behaviour(rng):
    model = SumOfLinear()
    x = fg.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    step = fg.compile(model, example_inputs=(x,))  # returns a loss: gradients into .grad, as before
    assert isinstance(step, CompiledStep)
    step(x)
    np.testing.assert_allclose(model.fc.weight.grad.numpy(), x.numpy().sum(0, keepdims=True), rtol=1e-6)


def test_memory_report_counts_weights_buffers_and_arena():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
    model.eval()
    plan = fg.compile(model, example_inputs=(fg.zeros(2, 4),))
    mem = plan.memory()["cpu"]
    assert mem["weights"] == (4 * 8 + 8 + 8 + 8) * 4
    assert mem["buffers"] == sum(b.numel() * b.dtype.itemsize for b in model.buffers())
    assert mem["arena"] == plan.stats["arena_bytes"]
    assert mem["total"] == mem["weights"] + mem["buffers"] + mem["arena"]


def test_forward_plan_errors():
    with pytest.raises(TypeError, match=r"forward_plan: output\[1\] is a str, not a Tensor"):
        fg.compile(lambda x: (x * 2, "label"), example_inputs=(fg.ones(2),))
    with pytest.raises(fg.InvalidArgumentError, match="dynamic=True and buckets apply to training steps"):
        fg.compile(lambda x: (x * 2, x), example_inputs=(fg.ones(2),), dynamic=True)
    def writes_its_input(x, cache):
        cache.add_(x)
        return cache * 2
    with pytest.raises(fg.InvalidArgumentError, match=r"compile: the step writes input 1 in place \('add_'\); a "
                                                      "plan's inputs are values"):
        fg.compile(writes_its_input, example_inputs=(fg.ones(3), fg.zeros(3)))
    with pytest.raises(fg.InvalidArgumentError, match="the step must produce a one-element loss tensor"):
        fg.compile(nn.Linear(2, 3), lambda out, y: out - y, None,
                   example_inputs=(fg.ones(1, 2), fg.ones(1, 3)))  # with a loss_fn, a loss is required
