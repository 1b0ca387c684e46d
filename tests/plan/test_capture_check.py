"""The capture self-check: the first captured step of a CUDA plan is compared with a plain step
from the same state (parameters, optimizer state, gradients, random counters), and a difference
makes the plan run uncaptured with the buffer named in stats["cuda_graph"]. The comparison
itself (Plan.check_step) runs on every device: two plain steps from one state must agree
bitwise, a planted side effect is named with the instruction that wrote the buffer, and either
way exactly one step is applied."""
import re

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def cuda_only(device):
    if device == "cpu":
        pytest.skip("CUDA graph capture exists only on CUDA; Plan.check_step is tested on the CPU")


def compiled(device, dropout=0.3):
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 5)).to(device)
    opt = fg.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    rng = np.random.default_rng(3)
    xs = [fg.tensor(rng.standard_normal((16, 20)).astype(np.float32), device=device) for _ in range(3)]
    ys = [fg.tensor(rng.integers(0, 5, 16), device=device) for _ in range(3)]
    return model, fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0])), xs, ys


def values(model):
    return [p.cpu().numpy().copy() for p in model.parameters()]


def after_plain_steps(device, n):
    """Parameters and generator state after n plain calls of a fresh step (the reference)."""
    model, step, xs, ys = compiled(device)
    fg.manual_seed(7)
    for x, y in zip(xs[:n], ys[:n]):
        step(x, y)
    return values(model), fg.get_rng_state()


def test_two_plain_steps_from_one_state_agree_bitwise_and_one_step_is_applied(device, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")  # plain calls on CUDA too
    expected, rng = after_plain_steps(device, 2)
    model, step, xs, ys = compiled(device)
    fg.manual_seed(7)
    step(xs[0], ys[0])
    assert step.plan.check_step([xs[1], ys[1]]) == ""  # dropout draws the same masks from the restored counter
    assert fg.get_rng_state() == rng
    for got, want in zip(values(model), expected):
        np.testing.assert_array_equal(got, want)


def test_the_compared_step_starts_from_a_poisoned_arena(device, monkeypatch):
    # Review G1: before the compared step every arena intermediate and the kernel scratch are
    # filled with NaN bytes (input slots spared), so a writer missing from it cannot hide behind the
    # plain step's bytes. Two plain steps still agree bitwise (the test above); here the poisoning
    # is seen in the byte count, beyond what FLOWGRAD_DEBUG_PLAN's own poisoning of two steps adds.
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    monkeypatch.setenv("FLOWGRAD_DEBUG_PLAN", "1")
    _, step, xs, ys = compiled(device)
    step(xs[0], ys[0])
    before = step.stats["poisoned_bytes"]
    step(xs[1], ys[1])
    per_step = step.stats["poisoned_bytes"] - before
    before = step.stats["poisoned_bytes"]
    assert step.plan.check_step([xs[2], ys[2]]) == ""
    assert step.stats["poisoned_bytes"] - before > 2 * per_step


def test_a_planted_difference_is_named_with_its_writer_and_undone(device, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    expected, rng = after_plain_steps(device, 1)
    model, step, xs, ys = compiled(device)
    fg.manual_seed(7)

    def side_effect():  # the compared step also moves one weight: a real difference in real state
        with fg.no_grad():
            model[3].weight.add_(1e-3)

    found = step.plan.check_step([xs[0], ys[0]], side_effect)
    assert re.fullmatch(r"3\.weight differs at element 0: \S+ \(plain\) vs \S+ \(checked\); "
                        r"written by instruction \d+ \(\w+\)", found), found
    assert fg.get_rng_state() == rng
    for got, want in zip(values(model), expected):  # one plain step, the planted change gone
        np.testing.assert_array_equal(got, want)


def test_check_step_validates_inputs_like_a_call():
    _, step, xs, ys = compiled("cpu")
    with pytest.raises(fg.ShapeError, match=r"compiled step: input 0 has shape \(3, 20\), the plan was compiled for \(16, 20\)"):
        step.plan.check_step([fg.zeros(3, 20), ys[0]])


def test_captured_step_passes_the_self_check_and_applies_one_step(device, monkeypatch):
    cuda_only(device)
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    expected, rng = after_plain_steps(device, 3)
    monkeypatch.delenv("FLOWGRAD_NO_CUDA_GRAPH")
    model, step, xs, ys = compiled(device)
    fg.manual_seed(7)
    step(xs[0], ys[0])  # warm-up
    step(xs[1], ys[1])  # captured, checked against a plain step
    assert re.match(r"captured: one CUDA graph of \d+ nodes.*; self-check passed", step.stats["cuda_graph"]), \
        step.stats["cuda_graph"]
    step(xs[2], ys[2])  # replayed
    assert fg.get_rng_state() == rng
    for got, want in zip(values(model), expected):
        np.testing.assert_array_equal(got, want)


def test_capture_check_can_be_turned_off(device, monkeypatch):
    cuda_only(device)
    monkeypatch.setenv("FLOWGRAD_CAPTURE_CHECK", "0")
    _, step, xs, ys = compiled(device)
    step(xs[0], ys[0])
    step(xs[1], ys[1])
    assert step.stats["cuda_graph"].startswith("captured: one CUDA graph of")
    assert "self-check" not in step.stats["cuda_graph"]


def attention_step(device):
    """A step whose backward holds flash_attention_backward, an op that adds floats with atomics on
    CUDA: its self-check compares within a tolerance and a measured noise floor (review G9)."""
    fg.manual_seed(0)
    qkv = nn.Linear(16, 48).to(device)
    head = nn.Linear(16, 3).to(device)
    model = nn.Sequential(qkv, head)  # a container for their parameters
    opt = fg.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8)

    def loss_of(x, y):
        q, k, v = qkv(x).reshape(4, 9, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.cross_entropy(head(out.transpose(1, 2).reshape(4, 9, 16).mean(1)), y)

    rng = np.random.default_rng(3)
    x = fg.tensor(rng.standard_normal((4, 9, 16)).astype(np.float32), device=device)
    y = fg.tensor(rng.integers(0, 3, 4), device=device)
    step = fg.compile(loss_of, optimizer=opt, example_inputs=(x, y))
    return model, head, step, x, y


@pytest.mark.parametrize("planted, found", [(1e-3, True), (1e-8, False)])
def test_an_atomic_plan_is_compared_within_its_tolerance(device, monkeypatch, planted, found):
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    model, head, step, x, y = attention_step(device)
    step(x, y)
    assert "flash_attention_backward" in {ins["op"] for ins in step.plan.ir()}

    def side_effect():  # the compared step moves one weight by `planted` (weights are ~0.2 here)
        with fg.no_grad():
            head.weight.add_(planted)

    diff = step.plan.check_step([x, y], side_effect)
    if found:
        assert re.fullmatch(r"\w+ differs at element 0: \S+ \(plain\) vs \S+ \(checked\); written by instruction \d+ \(adam_update\w*\)", diff), diff
        twice, _, again, _, _ = attention_step(device)
        again(x, y)
        again(x, y)
        for got, want in zip(values(model), values(twice)):  # the planted change undone, one plain step applied
            np.testing.assert_array_equal(got, want)
    else:  # below 1e-4 of the weight's largest magnitude: the order of atomic sums could make it
        assert diff == ""
