"""Compiled FlowBuilder control flow: switch and while_/until become branch instructions that
decide at run time (not unrolled, not frozen), agree with eager training step for step, and
are planned safely."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

from test_compile import overlapping_buffers

STEPS = 30
OPTIMIZERS = {
    "sgd": lambda ps: fg.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: fg.optim.Adam(ps, lr=0.01),
}


def switch_graph():
    return (fg.FlowBuilder(nn.Linear(6, 8)).tag("h")
            .switch(fg.flow.ArgmaxSelector(8, 2), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 8))
            .through(nn.Linear(8, 3)).tag("logits")
            .build())


def while_graph():
    return (fg.FlowBuilder(nn.Linear(6, 8)).loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
            .while_(fg.flow.ThresholdHalt(0.05), 5)
            .through(nn.Linear(8, 3)).build())


def until_graph():
    return (fg.FlowBuilder(nn.Linear(6, 8)).loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
            .until(fg.flow.ThresholdHalt(0.0), 4)
            .through(nn.Linear(8, 3)).build())


def every_construct_graph():
    """also, split/merge, gate with using, switch, for_/while_/until loops and map."""
    return (fg.FlowBuilder(nn.Linear(6, 8)).tag("in")
            .also(nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
            .split(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU())).merge(fg.flow.Add())
            .gate(fg.flow.SoftmaxRouter(8, 2), nn.Linear(8, 8), nn.Linear(8, 8)).using("in")
            .switch(fg.flow.ArgmaxSelector(8, 2), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 8))
            .loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh())).for_(2)
            .loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh())).while_(fg.flow.ThresholdHalt(0.05), 3)
            .loop(nn.Sequential(nn.Linear(8, 8), nn.Tanh())).until(fg.flow.ThresholdHalt(0.0), 3)
            .map(nn.Linear(4, 4)).slices(2)
            .through(nn.Linear(8, 3)).tag("logits")
            .build())


GRAPHS = {"switch": switch_graph, "while": while_graph, "until": until_graph, "every": every_construct_graph}


def batches(device, n=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    # per-batch offsets move the selector's scores and the halts' means: decisions change per call
    xs = [fg.tensor((rng.standard_normal((5, 6)) + rng.uniform(-1.5, 1.5)).astype(np.float32)).to(device)
          for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 3, 5)).to(device) for _ in range(n)]
    return xs, ys


def make(kind, device, opt_name):
    fg.manual_seed(0)
    g = GRAPHS[kind]().to(device)
    return g, OPTIMIZERS[opt_name](g.parameters())


def branch_runs(step):
    """{op: [runs per block]} of the top-level branch instructions (first of each kind)."""
    runs = {}
    for r in step.ir():
        if r["branch"] is not None:
            runs.setdefault(r["op"], list(r["branch"]["runs"]))
    return runs


@pytest.mark.parametrize("kind", sorted(GRAPHS))
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_compiled_control_flow_trains_like_eager(kind, opt_name, device):
    xs, ys = batches(device)
    g, opt = make(kind, device, opt_name)
    eager = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = F.cross_entropy(g(x), y)
        loss.backward()
        opt.step()
        eager.append(loss.item())
    cg, copt = make(kind, device, opt_name)
    step = fg.compile(cg, F.cross_entropy, copt, example_inputs=(xs[0], ys[0]))
    step.plan.check_memory()
    assert overlapping_buffers(step.plan.buffers()) == []
    compiled = [step(x, y).item() for x, y in zip(xs, ys)]
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(cg.named_parameters(), g.named_parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.cpu().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    runs = branch_runs(step)
    if kind in ("switch", "every"):
        assert len(runs["switch"]) == 2 and sum(runs["switch"]) == STEPS, runs
    if kind == "switch":
        assert min(runs["switch"]) > 0, runs  # both branches taken
    if kind in ("while", "until", "every"):
        assert "loop_backward" in runs and "guard" in runs


@pytest.mark.parametrize("kind", ["while", "until"])
def test_loops_run_data_dependent_iterations_with_eager_values_and_gradients(kind, device):
    xs, _ = batches(device, n=12, seed=1)
    fg.manual_seed(0)
    g = GRAPHS[kind]().to(device)
    step = fg.compile(g, _SumSquares(), example_inputs=(xs[0], xs[0][:, :3].contiguous()))
    bound = [(n, p, p.grad) for n, p in g.named_parameters() if p.grad is not None]  # the step writes these
    assert any("body" in n for n, _, _ in bound)
    counts = []
    for x in xs:
        target = x[:, :3].contiguous()
        before = sum(branch_runs(step)["loop_backward"])
        loss = step(x, target).item()
        counts.append(sum(branch_runs(step)["loop_backward"]) - before)
        expected = _SumSquares()(g(x), target)
        grads = fg.autograd.grad([expected], [p for _, p, _ in bound], allow_unused=True)
        assert loss == pytest.approx(expected.item(), rel=1e-5)
        for (n, _, compiled), eager in zip(bound, grads):
            want = np.zeros(compiled.shape, np.float32) if eager is None else eager.cpu().numpy()
            np.testing.assert_allclose(compiled.cpu().numpy(), want, rtol=1e-4, atol=1e-6, err_msg=n)
    assert len(set(counts)) > 1, counts  # the iteration count follows the data


class _SumSquares(nn.Module):
    def forward(self, out, target):
        return ((out - target) ** 2).mean()


def test_branch_instructions_show_in_text_ir_and_dot():
    xs, ys = batches("cpu", n=1)
    g, opt = make("every", "cpu", "adam")
    step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    text = str(step)
    assert "switch [conditional IF/ELSE" in text and "while [conditional WHILE" in text
    assert "until [conditional WHILE" in text and "loop_backward [conditional WHILE" in text
    assert "guard [conditional IF" in text and "branch 1:" in text and "halt:" in text
    kinds = {r["branch"]["kind"]: r["branch"] for r in step.ir() if r["branch"] is not None}
    assert set(kinds) == {"switch", "while", "until", "loop_backward", "guard"}
    assert kinds["switch"]["selector"] is not None and len(kinds["switch"]["blocks"]) == 2
    assert kinds["while"]["max_iter"] == 3 and kinds["while"]["blocks"][1][0]["op"] == "linear_tanh"
    assert step.stats["branches"] == sum(r["branch"] is not None for r in step.ir()) >= 7
    dot = step.dot()
    assert "shape=diamond" in dot and "subgraph cluster_" in dot


def test_forward_plan_runs_branches():
    xs, _ = batches("cpu", n=6)
    g, opt = make("every", "cpu", "sgd")
    infer = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], fg.tensor([0, 1, 2, 0, 1]))).forward_plan(xs[0])
    for x in xs:
        with fg.no_grad():
            expected = g(x).numpy()
        np.testing.assert_allclose(infer(x).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_switch_branches_of_different_shapes_raise():
    g = (fg.FlowBuilder(nn.Linear(4, 4)).switch(fg.flow.ArgmaxSelector(4, 2), nn.Linear(4, 4), nn.Linear(4, 3))
         .through(_Sum()).build())
    with pytest.raises(fg.GraphError, match="compiled switch needs every branch to return the same shape"):
        fg.compile(g, example_inputs=(fg.randn(3, 4),))


def test_loop_body_changing_shape_raises():
    g = (fg.FlowBuilder(nn.Linear(4, 4)).loop(nn.Linear(4, 4)).until(fg.flow.ThresholdHalt(0.0), 3)
         .through(_Sum()).build())
    fg.compile(g, example_inputs=(fg.randn(3, 4),))  # same shape: fine (random ops inside: test_rng_regions.py)
    with pytest.raises(fg.GraphError, match="must return its input's shape and dtype"):
        fg.compile(_Widen(), example_inputs=(fg.randn(3, 4),))


class _Sum(nn.Module):
    def forward(self, x):
        return x.sum()


class _Widen(nn.Module):
    """A loop whose body (a Python module) widens its input: eager runs it, compile refuses."""

    def __init__(self):
        super().__init__()
        self.g = (fg.FlowBuilder(nn.Linear(4, 4)).loop(_Grow()).while_(fg.flow.ThresholdHalt(10.0), 3)
                  .through(_Sum()).build())

    def forward(self, x):
        return self.g(x)


class _Grow(nn.Module):
    def forward(self, x):
        return fg.cat([x, x], -1)


@pytest.mark.parametrize("switches", [{"FLOWGRAD_NO_PLANNER": "1"}, {"FLOWGRAD_NO_FUSION": "1"}])
def test_kill_switches_give_the_same_numbers_with_branches(switches, monkeypatch):
    xs, ys = batches("cpu", n=8)

    def run():
        g, opt = make("every", "cpu", "adam")
        step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
        return [step(x, y).item() for x, y in zip(xs, ys)]

    reference = run()
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    assert run() == reference


@pytest.mark.parametrize("kind", ["mlp", "every"])
def test_debug_plan_poisons_released_ranges_and_changes_no_result(kind, monkeypatch, device):
    xs, ys = batches(device, n=4)

    def run():
        fg.manual_seed(0)
        model = (nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 3))
                 if kind == "mlp" else every_construct_graph()).to(device)
        step = fg.compile(model, F.cross_entropy, fg.optim.Adam(model.parameters(), lr=0.01),
                          example_inputs=(xs[0], ys[0]))
        return [step(x, y).item() for x, y in zip(xs, ys)], step

    reference, plain = run()
    assert "poisoned_bytes" not in plain.stats
    assert plain.stats["arena_bytes"] < plain.stats["naive_bytes"]  # ranges are reused
    monkeypatch.setenv("FLOWGRAD_DEBUG_PLAN", "1")
    poisoned, step = run()
    assert poisoned == reference
    per_call = step.stats["poisoned_bytes"]
    assert per_call > 0
    step(xs[0], ys[0])
    assert step.stats["poisoned_bytes"] > per_call  # every call poisons again
