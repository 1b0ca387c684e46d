"""One RNG mechanism for every way a compiled step runs (plain calls, profiling, the capture
self-check's comparison, CUDA replays): random calls read the plan's {seed, base} pair, its last
instruction advances it, and before each run the host writes the pair only when its generator
moved elsewhere (fg.manual_seed, eager random ops, another plan of the step). Compiled steps draw
what eager steps draw from the same generator state, step after step."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def dropout_mlp(device):
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3)).to(device)


def batches(device, n):
    rng = np.random.default_rng(4)
    xs = [fg.tensor(rng.standard_normal((6, 8)).astype(np.float32), device=device) for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 3, 6), device=device) for _ in range(n)]
    return xs, ys


def values(model):
    return [p.cpu().numpy().copy() for p in model.parameters()]


def sgd_step(model, xs, ys):
    return fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(xs[0], ys[0]))


def assert_same_end(a, b):
    """Two (parameters, generator state) results are the same, bitwise."""
    (got, state), (want, expected) = a, b
    assert state == expected
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)


def between_steps(i, device):
    """What user code does between steps 1 and 2 (a new seed) and 3 and 4 (an eager draw)."""
    if i == 1:
        fg.manual_seed(21)
    if i == 3:
        fg.rand(5, device=device)


def test_steps_follow_manual_seed_and_eager_draws_between_them(device, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")  # plain calls on CUDA too (replays: test_cuda_graph.py)
    xs, ys = batches(device, 6)
    model = dropout_mlp(device)
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    fg.manual_seed(5)
    eager = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        eager.append(loss.item())
        between_steps(i, device)
    eager_state = fg.get_rng_state()

    step = sgd_step(dropout_mlp(device), xs, ys)
    fg.manual_seed(5)
    compiled, writes = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        compiled.append(step(x, y).item())
        writes.append(step.stats["philox_writes"])
        between_steps(i, device)
    np.testing.assert_allclose(compiled, eager, rtol=2e-5, atol=1e-6)  # the same masks: p=0.5 shows any other
    assert fg.get_rng_state() == eager_state
    # the first call writes the pair; later calls find it advanced by the plan itself, except
    # after the new seed (call 2) and the eager draw (call 4)
    assert writes == [1, 1, 2, 2, 3, 3]


def test_profiling_a_step_draws_like_a_call(monkeypatch):
    xs, ys = batches("cpu", 3)

    def train(profile):
        model = dropout_mlp("cpu")
        step = sgd_step(model, xs, ys)
        fg.manual_seed(8)
        step(xs[0], ys[0])
        (step.profile if profile else step)(xs[1], ys[1])
        step(xs[2], ys[2])
        return values(model), fg.get_rng_state()

    assert_same_end(train(True), train(False))


def _plant(model):
    def side_effect():
        with fg.no_grad():
            model[3].weight.add_(1e-3)
    return side_effect


@pytest.mark.parametrize("planted", [False, True])
def test_the_capture_self_check_path_draws_like_plain_calls(device, planted, monkeypatch):
    """Plan.check_step runs the step twice from one state; the pair is part of that state, so both
    runs draw the step's masks, and the calls after it go on from there (after a new seed too)."""
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    xs, ys = batches(device, 3)

    def train(check):
        model = dropout_mlp(device)
        step = sgd_step(model, xs, ys)
        fg.manual_seed(7)
        step(xs[0], ys[0])
        fg.manual_seed(9)  # the checked call must write the pair
        if check:
            found = step.plan.check_step([xs[1], ys[1]], _plant(model) if planted else None)
            assert (found != "") == planted, found
        else:
            step(xs[1], ys[1])
        fg.rand(3, device=device)
        step(xs[2], ys[2])
        return values(model), fg.get_rng_state()

    assert_same_end(train(True), train(False))


def test_shape_buckets_keep_each_plans_pair_right(device):
    """Plans of one dynamic step share an arena but each has its own pair: alternating buckets,
    every call still draws what an eager call of the same input draws."""
    fg.manual_seed(0)
    lin = nn.Linear(6, 5).to(device)

    def fn(x):  # a one-element loss: a plain function compiles to a forward-only plan
        return (F.dropout(lin(x), 0.5) + fg.randn(x.shape[0], 5, device=x.device)).sum()

    rng = np.random.default_rng(2)
    inputs = [fg.tensor(rng.standard_normal((n, 6)).astype(np.float32), device=device) for n in (4, 8, 8, 4, 8, 4)]
    step = fg.compile(fn, example_inputs=(inputs[0],), dynamic=True, buckets=[4, 8], bucket_dim=0)
    fg.manual_seed(3)
    with fg.no_grad():
        eager = [fn(x).cpu().numpy() for x in inputs]
    fg.manual_seed(3)
    compiled = [step(x).cpu().numpy() for x in inputs]
    assert sorted(r["bucket"] for r in step.stats["plans"]) == [4, 8]
    for got, want in zip(compiled, eager):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_explain_shows_the_advance_as_the_steps_last_instruction():
    xs, ys = batches("cpu", 1)
    step = sgd_step(dropout_mlp("cpu"), xs, ys)
    rows = step.explain().rows
    assert rows[-1]["op"] == "philox_advance_"
    assert rows[-1]["buffer"] == "philox" and rows[-1]["offset"] is None  # the pair lives outside the arena
    assert [r["op"] for r in rows].count("philox_advance_") == 1
    assert "philox_advance_" in str(step.explain())
