"""Random ops inside compiled control flow and parallel graph levels. Each switch branch, each
iteration of a while_/until loop (its halt and its body) and each branch of a parallel level draws
from a stream derived from the generator's state where the construct starts: eagerly on the host,
in plans with philox_derive over the step's {seed, base} pair (a loop's from the iteration the plan
writes). So compiled steps draw bitwise what eager steps draw, step after step, and the generator
ends where eager steps leave it."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def switch_graph():
    return (fg.FlowBuilder(nn.Linear(6, 8))
            .switch(fg.flow.ArgmaxSelector(8, 2), nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)),
                    nn.Sequential(nn.Dropout(0.3), nn.Linear(8, 8)))
            .through(nn.Linear(8, 3)).build())


def while_graph():
    return (fg.FlowBuilder(nn.Linear(6, 8)).loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Dropout(0.25)))
            .while_(fg.flow.ThresholdHalt(0.05), 4)
            .through(nn.Linear(8, 3)).build())


def until_graph():
    return (fg.FlowBuilder(nn.Linear(6, 8)).loop(nn.Sequential(nn.Dropout(0.4), nn.Linear(8, 8), nn.Tanh()))
            .until(fg.flow.ThresholdHalt(0.0), 3)
            .through(nn.Linear(8, 3)).build())


def level_graph():
    """A parallel level of three branches that all draw, then a draw after the merge."""
    return (fg.FlowBuilder(nn.Linear(6, 8))
            .split(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 8)),
                   nn.Dropout(0.2))
            .merge(fg.flow.Add()).through(nn.Dropout(0.1)).through(nn.Linear(8, 3)).build())


def nested_graph():
    """A switch inside a level branch and a loop after them: streams derived from derived streams."""
    inner = (fg.FlowBuilder(nn.Linear(8, 8))
             .switch(fg.flow.ArgmaxSelector(8, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.2), nn.Tanh()))
             .build())
    return (fg.FlowBuilder(nn.Linear(6, 8)).split(inner, nn.Dropout(0.3)).merge(fg.flow.Add())
            .loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Dropout(0.5))).until(fg.flow.ThresholdHalt(0.0), 3)
            .through(nn.Linear(8, 3)).build())


GRAPHS = {"switch": switch_graph, "while": while_graph, "until": until_graph, "level": level_graph,
          "nested": nested_graph}


def batches(device, n, seed=0):
    rng = np.random.default_rng(seed)
    # per-batch offsets move the selector's scores and the halts' means: decisions change per call
    xs = [fg.tensor((rng.standard_normal((5, 6)) + rng.uniform(-1.5, 1.5)).astype(np.float32)).to(device)
          for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 3, 5)).to(device) for _ in range(n)]
    return xs, ys


def make(kind, device):
    fg.manual_seed(0)
    g = GRAPHS[kind]().to(device)
    return g, fg.optim.SGD(g.parameters(), lr=0.1, momentum=0.9)


def eager_training(g, opt, xs, ys, seed):
    """The losses of eager steps from `seed` on, one per batch."""
    fg.manual_seed(seed)
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = F.cross_entropy(g(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("kind", sorted(GRAPHS))
def test_compiled_training_draws_what_eager_training_draws(kind, device):
    xs, ys = batches(device, 12)
    g, opt = make(kind, device)
    eager = eager_training(g, opt, xs, ys, seed=11)
    eager_state = fg.get_rng_state()

    cg, copt = make(kind, device)
    step = fg.compile(cg, F.cross_entropy, copt, example_inputs=(xs[0], ys[0]))
    fg.manual_seed(11)
    compiled = [step(x, y).item() for x, y in zip(xs, ys)]
    # the same masks: with p up to 0.5 another mask moves a loss far past this tolerance
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(cg.named_parameters(), g.named_parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.cpu().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    assert fg.get_rng_state() == eager_state
    ops = [r["op"] for r in step.ir()]
    assert ops[-1] == "philox_advance_"


def _masks(out):
    return out.cpu().numpy() != 0


class _Drops(nn.Module):
    """Dropout only, so the output's zeros are exactly the draws' mask."""

    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x)


@pytest.mark.parametrize("construct", ["switch", "while", "until", "level"])
def test_forward_plans_draw_the_eager_masks_bitwise(construct, device):
    """Graphs of dropouts only: the compiled forward's zeros are the eager forward's, call after
    call, and the values agree to rounding."""
    b = fg.FlowBuilder(_Drops(0.5))
    if construct == "switch":
        b = b.switch(fg.flow.ArgmaxSelector(16, 3), _Drops(0.5), _Drops(0.3), _Drops(0.7))
    elif construct == "while":
        b = b.loop(_Drops(0.2)).while_(fg.flow.ThresholdHalt(0.01), 4)
    elif construct == "until":
        b = b.loop(_Drops(0.2)).until(fg.flow.ThresholdHalt(-1.0), 3)
    else:
        b = b.split(_Drops(0.5), _Drops(0.5), _Drops(0.5), _Drops(0.5)).merge(fg.flow.Add())
    fg.manual_seed(1)
    g = b.through(_Drops(0.1)).build().to(device)
    rng = np.random.default_rng(5)
    xs = [fg.tensor((rng.uniform(0.5, 2.0, (7, 16)) * rng.choice([-1, 1], (7, 16))).astype(np.float32)).to(device)
          for _ in range(6)]
    fg.manual_seed(4)
    with fg.no_grad():
        eager = [g(x) for x in xs]
    state = fg.get_rng_state()
    plan = fg.compile(g, example_inputs=(xs[0],))
    fg.manual_seed(4)
    compiled = [plan(x) for x in xs]
    for got, want in zip(compiled, eager):
        np.testing.assert_array_equal(_masks(got), _masks(want))
        np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=1e-6, atol=0)
    assert fg.get_rng_state() == state
    assert len({_masks(t).tobytes() for t in eager}) == len(eager)  # fresh draws every call


def test_the_plan_derives_each_streams_pair_inside_its_block():
    xs, ys = batches("cpu", 1)
    g, opt = make("nested", "cpu")
    step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    text = str(step)
    assert "philox_derive" in text
    derives = []

    def walk(rows, depth):
        for r in rows:
            if r["op"] == "philox_derive":
                derives.append(depth)
            if r["branch"] is not None:
                for block in r["branch"]["blocks"]:
                    walk(block, depth + 1)

    walk(step.ir(), 0)
    assert 0 in derives and max(derives) >= 1, derives  # level branches at the top, the rest inside blocks
    pairs = [b for b in step.plan.buffers() if b["name"] == "philox"]
    assert len(pairs) == 1 and pairs[0]["kind"] == "external"


def test_compiling_after_seeding_leaves_the_generator_where_the_seed_put_it():
    """fg.compile traces the step once (its draws are reserved while tracing) and puts the
    generator back, so steps compiled right after fg.manual_seed draw what eager steps draw from
    that seed, and the generator ends where the eager steps left it."""
    xs, ys = batches("cpu", 4)
    g, opt = make("nested", "cpu")
    eager = eager_training(g, opt, xs, ys, seed=3)
    state = fg.get_rng_state()
    cg, copt = make("nested", "cpu")
    fg.manual_seed(3)
    step = fg.compile(cg, F.cross_entropy, copt, example_inputs=(xs[0], ys[0]))
    assert fg.get_rng_state() == (3, 0)
    compiled = [step(x, y).item() for x, y in zip(xs, ys)]
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
    assert fg.get_rng_state() == state


def test_a_step_without_draws_still_moves_the_generator_as_eager_steps_do():
    """Levels, switches and loops fork the generator once each; a plan that draws nothing has no
    pair but takes the same counters, so eager draws after it match."""
    g = (fg.FlowBuilder(nn.Linear(4, 4)).split(nn.Linear(4, 4), nn.Linear(4, 4)).merge(fg.flow.Add())
         .switch(fg.flow.ArgmaxSelector(4, 2), nn.Linear(4, 4), nn.Tanh()).build())
    x = fg.randn(3, 4)
    plan = fg.compile(g, example_inputs=(x,))
    assert "philox" not in [b["name"] for b in plan._plan.buffers()]
    fg.manual_seed(9)
    with fg.no_grad():
        g(x)
    after_eager = fg.get_rng_state()
    fg.manual_seed(9)
    plan(x)
    assert fg.get_rng_state() == after_eager != (9, 0)


def test_seeding_inside_a_traced_step_raises():
    def fn(x):
        fg.manual_seed(0)
        return (x + fg.rand(3)).sum()

    with pytest.raises(fg.InvalidArgumentError, match="draws from a generator state the step set itself"):
        fg.compile(fn, example_inputs=(fg.zeros(3),))
