"""Whole-step CUDA graph capture of compiled steps: the host-side rules (CPU plans, the
FLOWGRAD_NO_CUDA_GRAPH kill switch) on any machine, and on a GPU the warm-up / capture / replay
state machine, agreement with uncaptured runs, fresh dropout masks per replay (the random
counters' pair copied only when the host generator moved), and scheduler, load_state_dict,
Module.to and generator changes seen by replays."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def cuda_only(device):
    if device == "cpu":
        pytest.skip("CUDA graph capture exists only on CUDA; the CPU rules are tested below without a GPU")


def mlp(device, dropout=0.0):
    fg.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 5)).to(device)


def batches(device, n, seed=3):
    rng = np.random.default_rng(seed)
    xs = [fg.tensor(rng.standard_normal((16, 20)).astype(np.float32), device=device) for _ in range(n)]
    ys = [fg.tensor(rng.integers(0, 5, 16), device=device) for _ in range(n)]
    return xs, ys


def compiled(device, dropout=0.0, make_opt=lambda ps: fg.optim.AdamW(ps, lr=3e-3, weight_decay=0.1)):
    model = mlp(device, dropout)
    opt = make_opt(model.parameters())
    xs, ys = batches(device, 1)
    return model, opt, fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))


def train(step, xs, ys, between=None):
    losses = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        losses.append(step(x, y).item())
        if between:
            between(i)
    return losses


def test_cpu_plan_says_why_it_is_not_captured():
    _, _, step = compiled("cpu")
    step(*[b[0] for b in batches("cpu", 1)])
    assert step.stats["cuda_graph"] == "not used: a CPU plan"
    assert step.stats["cuda_graph_replays"] == 0
    assert step.plan.capture_blocker() == "not used: a CPU plan"
    assert step.plan.capture_blocker("cuda") == ""  # the same plan would be captured on a GPU


def test_kill_switch_rule_on_the_host(monkeypatch):
    _, _, step = compiled("cpu")
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    assert step.plan.capture_blocker("cuda").startswith("off: FLOWGRAD_NO_CUDA_GRAPH=1")
    assert step.plan.capture_blocker("cpu") == "not used: a CPU plan"  # CPU plans are never captured
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "0")
    assert step.plan.capture_blocker("cuda") == ""


def test_warm_up_then_capture_then_replay(device):
    cuda_only(device)
    _, _, step = compiled(device)
    xs, ys = batches(device, 5)
    assert step.stats["cuda_graph"].startswith("pending:")
    step(xs[0], ys[0])  # the warm-up run
    assert step.stats["cuda_graph"].startswith("pending:") and step.stats["cuda_graph_replays"] == 0
    step(xs[1], ys[1])  # captured, then replayed
    assert step.stats["cuda_graph"].startswith("captured: one CUDA graph of"), step.stats["cuda_graph"]
    for x, y in zip(xs[2:], ys[2:]):
        step(x, y)
    assert step.stats["cuda_graph_replays"] == 4


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_captured_and_uncaptured_steps_agree_over_30_steps(device, dropout, monkeypatch):
    cuda_only(device)
    xs, ys = batches(device, 30)
    model_a, _, step = compiled(device, dropout)
    fg.manual_seed(11)
    captured = train(step, xs, ys)
    assert step.stats["cuda_graph_replays"] == 29
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    model_b, _, plain = compiled(device, dropout)
    assert plain.stats["cuda_graph"].startswith("off: FLOWGRAD_NO_CUDA_GRAPH=1")
    fg.manual_seed(11)
    uncaptured = train(plain, xs, ys)
    assert plain.stats["cuda_graph_replays"] == 0
    # the same kernels on the same values (cuBLAS may pick another algorithm on the capture stream)
    np.testing.assert_allclose(captured, uncaptured, rtol=1e-6, atol=1e-7)
    for p, q in zip(model_a.parameters(), model_b.parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.cpu().numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_masks_fresh_per_replay_and_follow_the_host_generator(device, monkeypatch):
    cuda_only(device)
    xs, ys = batches(device, 8)
    xs, ys = [xs[0]] * 8, [ys[0]] * 8

    def run(capture):
        monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "0" if capture else "1")
        _, _, step = compiled(device, dropout=0.5, make_opt=lambda ps: fg.optim.SGD(ps, lr=0.0))
        fg.manual_seed(5)
        # eager draws between steps move the host generator: the replay must notice
        return train(step, xs, ys, between=lambda i: fg.rand(7, device=device) if i % 3 == 0 else None)

    captured = run(True)
    assert len(set(captured)) == len(captured)  # lr 0: only the dropout masks change the loss
    np.testing.assert_allclose(captured, run(False), rtol=1e-6, atol=1e-7)  # the same masks


def test_replays_with_an_unchanged_generator_neither_copy_the_pair_nor_wait(device, monkeypatch):
    """The pair is written once; replays find it where the graph's philox_advance_ left it, so they
    copy nothing and wait for nothing, until fg.manual_seed moves the host generator (one copy)."""
    cuda_only(device)
    xs, ys = batches(device, 6)

    def losses(step, check=lambda i, step, syncs: None):  # a new seed before call 4
        fg.manual_seed(3)
        out = []
        for i, (x, y) in enumerate(zip(xs, ys)):
            if i == 4:
                fg.manual_seed(4)
            before = fg.cuda.sync_count()
            out.append(step(x, y))
            check(i, step, fg.cuda.sync_count() - before)
        return [loss.item() for loss in out]

    def no_copy_no_wait(i, step, syncs):
        if i >= 2:  # after the warm-up call and the capture (whose self-check reads values back)
            assert syncs == 0 and step.stats["host_syncs"] == 0
        assert step.stats["philox_writes"] == (1 if i < 4 else 2), i

    _, _, step = compiled(device, dropout=0.5)
    captured = losses(step, no_copy_no_wait)
    assert step.stats["cuda_graph_replays"] == 5
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", "1")
    np.testing.assert_allclose(captured, losses(compiled(device, dropout=0.5)[2]), rtol=1e-6, atol=1e-7)


def test_profiling_between_replays_draws_like_a_call(device, monkeypatch):
    cuda_only(device)
    xs, ys = batches(device, 5)

    def train_with(profile):
        model, _, step = compiled(device, dropout=0.5, make_opt=lambda ps: fg.optim.SGD(ps, lr=0.1))
        fg.manual_seed(6)
        for i, (x, y) in enumerate(zip(xs, ys)):
            (step.profile if profile and i == 3 else step)(x, y)
        return [p.cpu().numpy() for p in model.parameters()], fg.get_rng_state()

    (profiled, state), (called, expected) = train_with(True), train_with(False)
    assert state == expected
    for p, q in zip(profiled, called):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-7)


def test_scheduler_change_is_seen_by_replays(device):
    cuda_only(device)
    model, opt, step = compiled(device, make_opt=lambda ps: fg.optim.SGD(ps, lr=0.1, momentum=0.9))
    xs, ys = batches(device, 3)
    step(xs[0], ys[0])
    step(xs[1], ys[1])  # captured
    before = [p.cpu().numpy().copy() for p in model.parameters()]
    opt.param_groups[0]["lr"] = 0.0
    opt.param_groups[0]["momentum"] = 0.0
    step(xs[2], ys[2])
    assert step.stats["cuda_graph_replays"] == 2
    for p, q in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.cpu().numpy(), q)


def test_load_state_dict_and_module_to_are_seen_by_replays(device):
    cuda_only(device)
    model, _, step = compiled(device, make_opt=lambda ps: fg.optim.SGD(ps, lr=0.05))
    xs, ys = batches(device, 4)
    saved = {k: v.cpu() for k, v in model.state_dict().items()}
    step(xs[0], ys[0])
    step(xs[1], ys[1])
    model.load_state_dict(saved)
    expected = F.cross_entropy(model(xs[2]), ys[2]).item()
    assert step(xs[2], ys[2]).item() == pytest.approx(expected, rel=1e-6)
    old = step.plan
    model.to("cpu").to(device)  # new storages: the step traces again and captures the new plan
    expected = F.cross_entropy(model(xs[3]), ys[3]).item()
    assert step(xs[3], ys[3]).item() == pytest.approx(expected, rel=1e-6)
    assert step.plan is not old and step.stats["cuda_graph"].startswith("pending:")


def test_replay_on_a_side_stream(device):
    cuda_only(device)
    xs, ys = batches(device, 4)
    _, _, step = compiled(device)
    fg.manual_seed(2)
    on_default = train(step, xs, ys)
    _, _, other = compiled(device)
    s = fg.cuda.Stream()
    s.wait_stream(fg.cuda.current_stream())
    fg.manual_seed(2)
    with fg.cuda.stream(s):
        on_side = train(other, xs, ys)
    assert on_side == on_default and other.stats["cuda_graph_replays"] == 3


def test_profile_times_every_instruction_and_trains(device):
    model, _, step = compiled(device, make_opt=lambda ps: fg.optim.SGD(ps, lr=0.1))
    xs, ys = batches(device, 3)
    step(xs[0], ys[0])
    step(xs[1], ys[1])  # captured on cuda
    before = [p.cpu().numpy().copy() for p in model.parameters()]
    records = step.profile(xs[2], ys[2])
    assert [r["op"] for r in records] == [r["op"] for r in step.ir()]
    assert [r["instruction"] for r in records] == list(range(step.stats["instructions"]))
    assert all(r["ms"] >= 0 for r in records) and sum(r["ms"] for r in records) > 0
    assert any(not np.array_equal(p.cpu().numpy(), q) for p, q in zip(model.parameters(), before))


@pytest.mark.parametrize("no_graph", ["0", "1"])
def test_profile_as_the_first_call_times_the_plain_step(device, no_graph, monkeypatch):
    # Review G8: profile() before any call used to capture without the warm-up run (the scratch
    # unsized: "allocating ... while the stream is being captured"); it now times this call's
    # plain step with events, as it does for a plan that is never captured (the kill switch).
    cuda_only(device)
    monkeypatch.setenv("FLOWGRAD_NO_CUDA_GRAPH", no_graph)

    class Attend(nn.Module):  # attention backward takes kernel scratch
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(dim=(1, 2, 3))

    fg.manual_seed(0)
    model = Attend().to(device)
    x, y = fg.randn(2, 5, 8, device=device), fg.randn(2, device=device)
    eager = Attend().to(device)
    eager.load_state_dict(model.state_dict())
    step = fg.compile(model, F.mse_loss, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, y))
    records = step.profile(x, y)
    assert [r["op"] for r in records] == [r["op"] for r in step.ir()] and all(r["ms"] >= 0 for r in records)
    for _ in range(3):
        step(x, y)
    opt = fg.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(4):  # the profiled call trained once, like a call
        opt.zero_grad()
        F.mse_loss(eager(x), y).backward()
        opt.step()
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.cpu().numpy(), q.cpu().numpy(), rtol=1e-5, atol=1e-6)
    if no_graph == "0":
        assert step.stats["cuda_graph"].startswith("captured"), step.stats["cuda_graph"]


@pytest.mark.parametrize("make, node", [("switch_graph", "IF/ELSE"), ("while_graph", "WHILE")])
def test_branch_instructions_are_not_captured_and_say_why(make, node):
    from test_control_flow import switch_graph, while_graph
    fg.manual_seed(0)
    model = {"switch_graph": switch_graph, "while_graph": while_graph}[make]()
    x, y = fg.randn(4, 6), fg.tensor(np.array([0, 1, 2, 0]))
    step = fg.compile(model, F.cross_entropy, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, y))
    branch = next(i for i, r in enumerate(step.ir()) if r["op"] in ("switch", "while"))
    why = step.plan.capture_blocker("cuda")
    assert why.startswith(f"not captured: instruction {branch} ({step.ir()[branch]['op']} '"), why
    assert f"its CUDA {node} conditional node is not built yet" in why


def test_a_deep_step_with_many_library_calls_is_counted_and_captured(device):
    """Review G12: the launch count types only the graph nodes a library call added, per capture
    (by its id); 40 linears (about 120 cuBLAS calls forward and backward) and a second step captured
    after the first both agree with their graphs' kernel nodes, so both are captured."""
    cuda_only(device)
    for depth in (40, 3):
        fg.manual_seed(1)
        layers = [m for _ in range(depth) for m in (nn.Linear(20, 20), nn.Tanh())]
        model = nn.Sequential(*layers, nn.Linear(20, 5)).to(device)
        opt = fg.optim.SGD(model.parameters(), lr=0.01)
        xs, ys = batches(device, 3)
        step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
        train(step, xs, ys)
        assert step.stats["cuda_graph"].startswith("captured"), (depth, step.stats["cuda_graph"])
        assert step.stats["cuda_graph_replays"] == 2  # the capturing call and one replay
