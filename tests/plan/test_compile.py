"""fg.compile: compiled steps agree with eager training on every test model, the memory plan is
proven safe, random draws are fresh and reproducible, and misuse raises clear errors."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn
from conftest import assert_trained_alike, planner_modes

STEPS = 30


def mlp():
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 5))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3),
                         nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(6, 5))


class CharTransformer(nn.Module):
    """The example's model: embedding + positions, causal pre-norm blocks with dropout, a head."""

    def __init__(self, vocab=11, dim=16, heads=2, layers=2, context=8, dropout=0.1):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(fg.randn(context, dim) * 0.02)
        self.blocks = nn.ModuleList([nn.TransformerBlock(dim, heads, causal=True) for _ in range(layers)])
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.drop(self.tokens(idx) + self.positions[:idx.shape[-1]])
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).reshape(-1, 11)


def graph():
    """A FlowBuilder graph with also, split/merge, gate, map and a for_ loop."""
    return (fg.FlowBuilder(nn.Linear(20, 16)).tag("in")
            .also(nn.Sequential(nn.Linear(16, 16), nn.Tanh()))
            .split(nn.Linear(16, 16), nn.Sequential(nn.Linear(16, 16), nn.ReLU())).merge(fg.flow.Add())
            .gate(fg.flow.SoftmaxRouter(16, 2), nn.Linear(16, 16), nn.Linear(16, 16)).using("in")
            .loop(nn.Sequential(nn.Linear(16, 16), nn.Tanh())).for_(2)
            .map(nn.Linear(4, 4)).slices(4)
            .through(nn.Linear(16, 5)).tag("logits")
            .build())


def data(kind, rng, batches):
    if kind == "cnn":
        xs = [rng.standard_normal((4, 1, 8, 8)).astype(np.float32) for _ in range(batches)]
        ys = [rng.integers(0, 5, 4) for _ in range(batches)]
    elif kind == "transformer":
        xs = [rng.integers(0, 11, (3, 8)) for _ in range(batches)]
        ys = [rng.integers(0, 11, 24) for _ in range(batches)]
    else:
        xs = [rng.standard_normal((16, 20)).astype(np.float32) for _ in range(batches)]
        ys = [rng.integers(0, 5, 16) for _ in range(batches)]
    return xs, ys


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": CharTransformer, "graph": graph}
OPTIMIZERS = {
    "sgd": lambda ps: fg.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda ps: fg.optim.Adam(ps, lr=3e-3),
    "adamw": lambda ps: fg.optim.AdamW(ps, lr=3e-3, weight_decay=0.1),
}


def build(kind, make_opt, device, seed=0):
    fg.manual_seed(seed)
    model = MODELS[kind]().to(device)
    opt = make_opt(model.parameters())
    sched = fg.optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.5)
    return model, opt, sched


def tensors(xs, ys, device):
    return [fg.tensor(x).to(device) for x in xs], [fg.tensor(y).to(device) for y in ys]


def train_eager(kind, make_opt, device, xs, ys):
    model, opt, sched = build(kind, make_opt, device)
    fg.manual_seed(1)
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return model, losses


def train_compiled(kind, make_opt, device, xs, ys):
    model, opt, sched = build(kind, make_opt, device)
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    step.plan.check_memory()
    fg.manual_seed(1)
    losses = []
    for x, y in zip(xs, ys):
        losses.append(step(x, y).item())
        sched.step()
    return model, losses, step


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_compiled_matches_eager(kind, opt_name, device):
    xs, ys = tensors(*data(kind, np.random.default_rng(3), STEPS), device)
    eager_model, eager = train_eager(kind, OPTIMIZERS[opt_name], device, xs, ys)
    model, compiled, step = train_compiled(kind, OPTIMIZERS[opt_name], device, xs, ys)
    np.testing.assert_allclose(compiled, eager, rtol=2e-5, atol=1e-6)
    assert compiled[-1] != compiled[0]
    # The plan computes weight gradients as B^T A^T instead of copying (A B)^T: the same sums in
    # another order. Adam turns such rounding differences in near-zero gradients into steps of
    # up to lr, so its parameters get an absolute tolerance of a fraction of lr over 30 steps.
    # Elements whose gradient is only rounding noise are left out for Adam: the key part of an
    # attention's qkv bias (softmax ignores a shift shared by a row's scores), which Adam turns
    # into steps of +-lr whose signs follow the noise.
    atol = 1e-5 if opt_name == "sgd" else 5e-4
    for (name, p), (_, q) in zip(model.named_parameters(), eager_model.named_parameters()):
        keep = np.abs(q.grad.cpu().numpy()) > 1e-7 if opt_name != "sgd" else np.ones(q.shape, dtype=bool)
        np.testing.assert_allclose(p.cpu().numpy()[keep], q.cpu().numpy()[keep], rtol=1e-4, atol=atol, err_msg=name)
        assert p.grad is not None and p.grad.shape == p.shape, name
    stats = step.stats
    assert stats["arena_bytes"] <= stats["naive_bytes"]
    assert stats["instructions"] == len(step.ir()) > 0


@pytest.mark.parametrize("make_opt, op", [
    (lambda groups: fg.optim.AdamW(groups, lr=3e-3, weight_decay=0.1), "adam_update_multi"),
    (lambda groups: fg.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True), "sgd_momentum_update_multi"),
    (lambda groups: fg.optim.SGD(groups, lr=0.05), "sgd_update_multi"),
])
def test_compiled_updates_are_multi_tensor_ops_per_group_and_match_eager(make_opt, op, device):
    xs, ys = tensors(*data("transformer", np.random.default_rng(4), 6), device)

    def build_groups():
        fg.manual_seed(0)
        model = CharTransformer(dropout=0.0).to(device)  # eager and compiled steps interleave: no draws
        params = list(model.parameters())
        return model, make_opt([{"params": params[:-2]}, {"params": params[-2:], "lr": 0.02}])

    eager_model, eager_opt = build_groups()
    model, opt = build_groups()
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    ops = [r["op"] for r in step.ir()]
    # one update per param group, however many parameters it holds (the first group has 24 here)
    assert len(opt.param_groups[0]["params"]) > 16
    assert ops.count(op) == len(opt.param_groups) and not any(o.endswith("_update") for o in ops)
    for x, y in zip(xs, ys):
        eager_opt.zero_grad()
        F.cross_entropy(eager_model(x), y).backward()
        eager_opt.step()
        step(x, y)
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        keep = np.abs(q.grad.cpu().numpy()) > 1e-7  # see test_compiled_matches_eager: Adam and noise
        np.testing.assert_allclose(p.cpu().numpy()[keep], q.cpu().numpy()[keep], rtol=1e-4, atol=5e-4, err_msg=name)


def test_plan_text_dot_and_ir_name_the_parts():
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 1), "cpu")
    model, opt, _ = build("mlp", OPTIMIZERS["adam"], "cpu")
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    text = str(step)
    assert "input x0: float32 (16, 20)" in text and "adam_update_multi(hyper0, 0.weight, grad(0.weight), step[0]" in text
    assert step.dot().startswith("digraph plan {") and "matmul" in step.dot()
    ops = [r["op"] for r in step.ir()]
    assert ops.count("adam_update_multi") == 1 and "matmul" in ops and "view" not in ops
    # linear's backward computes weight gradients as dY^T X: no transposed copy to fold is left.
    assert "contiguous" not in ops and step.stats["transposes_folded"] == 0
    first = step.ir()[0]
    assert first["op"].startswith("linear") and first["shape"] == [16, 32] and first["dtype"] == "float32"


def overlapping_buffers(buffers):
    """Pairs of arena buffers alive at the same time whose bytes overlap (an independent check). A
    result written over its operand (`takes`) meets it at one instruction only: the operand's last
    and the result's first, at the same offset and size."""
    bad = []
    live = [b for b in buffers if b["kind"] != "external" and not b["local"] and b["last"] >= max(b["first"], 0)]
    for i, a in enumerate(live):
        for b in live[i + 1:]:
            in_time = a["first"] <= b["last"] and b["first"] <= a["last"]
            in_bytes = a["offset"] < b["offset"] + b["bytes"] and b["offset"] < a["offset"] + a["bytes"]
            over = [(x, y) for x, y in ((a, b), (b, a)) if y["takes"] == x["name"]]
            in_place = any(x["last"] == y["first"] and x["offset"] == y["offset"] and x["bytes"] == y["bytes"]
                           for x, y in over)
            if in_time and in_bytes and a["bytes"] and b["bytes"] and not in_place:
                bad.append((a["name"], b["name"]))
    return bad


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_memory_plan_is_safe_and_reuses_bytes(kind):
    xs, ys = tensors(*data(kind, np.random.default_rng(0), 1), "cpu")
    model, opt, _ = build(kind, OPTIMIZERS["adamw"], "cpu")
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    assert overlapping_buffers(step.plan.buffers()) == []
    stats = step.stats
    assert stats["arena_bytes"] <= 0.75 * stats["naive_bytes"], stats


@pytest.mark.parametrize("switches", [{}, {"FLOWGRAD_NO_PLANNER": "1"}, {"FLOWGRAD_DEBUG_PLAN": "1"},
                                      {"FLOWGRAD_NO_FUSION": "1"}, {"FLOWGRAD_NO_CUDA_GRAPH": "1"},
                                      {"FLOWGRAD_NO_PLANNER": "1", "FLOWGRAD_DEBUG_PLAN": "1", "FLOWGRAD_NO_FUSION": "1"}])
def test_kill_switches_give_the_same_numbers(switches, monkeypatch, device):
    xs, ys = tensors(*data("transformer", np.random.default_rng(5), 6), device)
    _, reference, _ = train_compiled("transformer", OPTIMIZERS["adamw"], device, xs, ys)
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    _, losses, step = train_compiled("transformer", OPTIMIZERS["adamw"], device, xs, ys)
    assert losses == reference
    if "FLOWGRAD_NO_PLANNER" in switches:
        assert step.stats["arena_bytes"] == step.stats["naive_bytes"]


def test_dropout_masks_are_fresh_per_call_and_reproducible_from_the_seed(device):
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5), nn.Linear(64, 1)).to(device)
    x = fg.randn(4, 8).to(device)
    plan = fg.compile(nn.Sequential(model, _Sum()), example_inputs=(x,))
    fg.manual_seed(7)
    first = [plan(x).item() for _ in range(3)]
    fg.manual_seed(7)
    again = [plan(x).item() for _ in range(3)]
    assert first == again
    assert len(set(first)) == 3


class _Sum(nn.Module):
    def forward(self, x):
        return x.sum()


def test_forward_plan_shares_parameters_and_sees_training(device):
    xs, ys = tensors(*data("mlp", np.random.default_rng(1), 3), device)
    model, opt, _ = build("mlp", OPTIMIZERS["sgd"], device)
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    one = xs[1][:1].contiguous()
    infer = step.forward_plan(one)
    before = infer(one).cpu().numpy()
    np.testing.assert_allclose(before, model(one).detach().cpu().numpy(), rtol=1e-6, atol=1e-6)
    step(xs[0], ys[0])
    after = infer(one).cpu().numpy()
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, model(one).detach().cpu().numpy(), rtol=1e-6, atol=1e-6)


def test_shape_mismatch_names_the_input_and_dynamic_keeps_one_plan_per_shape():
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 1), "cpu")
    model, opt, _ = build("mlp", OPTIMIZERS["sgd"], "cpu")
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    with pytest.raises(fg.ShapeError, match=r"input 0 has shape \(8, 20\), the plan was compiled for \(16, 20\)"):
        step(xs[0][:8], ys[0][:8])
    with pytest.raises(fg.DTypeError, match="input 0 is float64, the plan was compiled for float32"):
        step(xs[0].double(), ys[0])
    dyn = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]), dynamic=True)
    small = dyn(xs[0][:8].contiguous(), ys[0][:8].contiguous())
    assert small.shape == () and len(dyn._plans) == 2


def test_scheduler_and_load_state_dict_are_seen_by_the_next_call():
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 2), "cpu")
    model, opt, _ = build("mlp", OPTIMIZERS["sgd"], "cpu")
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    saved = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    opt.param_groups[0]["lr"] = 0.0
    step(xs[0], ys[0])
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), saved[k])  # lr 0: nothing moves
    opt.param_groups[0]["lr"] = 0.05
    step(xs[0], ys[0])
    assert any(not np.array_equal(v.numpy(), saved[k]) for k, v in model.state_dict().items())
    model.load_state_dict({k: fg.tensor(v) for k, v in saved.items()})
    loss_a = step(xs[1], ys[1]).item()
    model.load_state_dict({k: fg.tensor(v) for k, v in saved.items()})
    expected = F.cross_entropy(model(xs[1]), ys[1]).item()
    assert loss_a == pytest.approx(expected, rel=1e-6)


def test_reassigned_parameter_makes_the_step_trace_again():
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 1), "cpu")
    model, _, _ = build("mlp", OPTIMIZERS["sgd"], "cpu")
    step = fg.compile(model, F.cross_entropy, example_inputs=(xs[0], ys[0]))
    old = step.plan
    model[0].weight = nn.Parameter(fg.zeros(32, 20))
    loss = step(xs[0], ys[0]).item()
    assert step.plan is not old
    assert loss == pytest.approx(F.cross_entropy(model(xs[0]), ys[0]).item(), rel=1e-6)


def test_without_optimizer_gradients_land_in_grad():
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 1), "cpu")
    model, _, _ = build("mlp", OPTIMIZERS["sgd"], "cpu")
    step = fg.compile(model, F.cross_entropy, example_inputs=(xs[0], ys[0]))
    step(xs[0], ys[0])
    compiled = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    F.cross_entropy(model(xs[0]), ys[0]).backward()
    for n, p in model.named_parameters():
        np.testing.assert_allclose(compiled[n], p.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=n)


def test_host_reads_in_python_control_flow_raise_at_compile_time():
    class ItemInside(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, x):
            y = self.fc(x).sum()
            return y * 2 if y.item() > 0 else y

    x = fg.randn(3, 4)
    with pytest.raises(fg.InvalidArgumentError, match=r"reads a computed value on the host \(item"):
        fg.compile(ItemInside(), example_inputs=(x,))


def test_values_made_outside_the_registry_during_the_step_raise():
    class Hidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, x):
            return (self.fc(x) * fg.tensor(x.numpy())).sum()

    with pytest.raises(fg.InvalidArgumentError, match="computed during the step outside the op registry|reads a computed"):
        fg.compile(Hidden(), example_inputs=(fg.randn(3, 4),))


def test_loss_must_be_one_element_and_inputs_tensors():
    with pytest.raises(fg.InvalidArgumentError, match="one-element loss"):
        fg.compile(nn.Linear(4, 2), lambda out, y: out - y, example_inputs=(fg.randn(3, 4), fg.randn(3, 2)))
    # without loss_fn and optimizer, a step that returns no loss is a forward plan (tests/plan/test_forward_plans.py)
    assert isinstance(fg.compile(nn.Linear(4, 2), example_inputs=(fg.randn(3, 4),)), fg.ForwardPlan)
    assert isinstance(fg.compile(nn.Linear(4, 2)), fg.CompiledModule)  # compiled lazily (test_compile_model.py)
    with pytest.raises(fg.InvalidArgumentError, match="example_inputs"):
        fg.compile(nn.Linear(4, 2), F.mse_loss)
    with pytest.raises(TypeError, match="input 0 must be a flowgrad Tensor"):
        fg.compile(nn.Linear(4, 2), example_inputs=(np.zeros((3, 4)),))


def test_compile_does_not_train_and_many_calls_do_not_grow_memory():
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 1), "cpu")
    model, opt, _ = build("mlp", OPTIMIZERS["adam"], "cpu")
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    assert int(opt.state_dict()["state"][0]["step"].item()) == 0
    for _ in range(50):
        step(xs[0], ys[0])
    held = fg.cpu_memory_stats()["allocated"]
    for _ in range(2000):
        step(xs[0], ys[0])
    assert fg.cpu_memory_stats()["allocated"] <= held
    assert int(opt.state_dict()["state"][0]["step"].item()) == 2050


def test_gradient_checkpointing_recomputes_inside_the_plan(device):
    xs, ys = tensors(*data("mlp", np.random.default_rng(2), 8), device)

    def run(compiled):
        fg.manual_seed(0)
        # Dropout inside: the recomputation replays the forward's mask from its Philox counters.
        model = nn.Sequential(nn.Checkpoint(nn.Sequential(nn.Linear(20, 32), nn.GELU(), nn.Dropout(0.3),
                                                          nn.Linear(32, 32))),
                              nn.Tanh(), nn.Linear(32, 5)).to(device)
        opt = fg.optim.SGD(model.parameters(), lr=0.1)
        if compiled:
            step = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
            return [step(x, y).item() for x, y in zip(xs, ys)], step
        losses = []
        for x, y in zip(xs, ys):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, None

    eager, _ = run(False)
    compiled, step = run(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    # The recomputed forward shows up a second time in the plan: two GELUs (each fused into its linear).
    assert [r["op"] for r in step.ir()].count("linear_gelu") == 2


def test_compiled_graph_delivers_tagged_values_to_observation(device):
    xs, ys = tensors(*data("mlp", np.random.default_rng(4), 3), device)
    fg.manual_seed(0)
    g = graph().to(device)
    opt = fg.optim.SGD(g.parameters(), lr=0.1)
    step = fg.compile(g, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
    for x, y in zip(xs, ys):
        with fg.no_grad():
            expected = g(x).cpu().numpy()  # the forward the step will run, before its update
        step(x, y)
        np.testing.assert_allclose(g.tagged("logits").cpu().numpy(), expected, rtol=1e-5, atol=1e-6)
        g.collect("logits")
    g.flush("logits")
    assert len(g.trend("logits")) == 1


def test_common_subexpressions_are_computed_once():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fg.randn(6, 4))

        def forward(self, x):
            return ((x @ self.w).tanh() + (x @ self.w).tanh()).sum()

    fg.manual_seed(0)
    model, x = Twice(), fg.randn(5, 6)
    step = fg.compile(model, example_inputs=(x,))
    forward = [r["op"] for r in step.ir()]
    assert forward.count("tanh") == 1 and step.stats["common_eliminated"] >= 2
    loss = step(x)
    assert loss.item() == pytest.approx(model(x).item(), rel=1e-6)
    reference = fg.randn(5, 6)
    (g,) = fg.autograd.grad([model(reference)], [model.w])
    step(reference)
    np.testing.assert_allclose(model.w.grad.numpy(), g.numpy(), rtol=1e-6)


class Elementwise(nn.Module):
    """Long same-shape elementwise chains (fused on the CPU) around a Linear."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        h = self.fc(x)
        y = ((h.tanh() * 0.5 + h.sigmoid()) * h).relu() - h.exp().clamp(max=3.0)
        return (y * y).mean()


@pytest.mark.parametrize("fusion", ["on", "off"])
def test_fused_elementwise_runs_match_eager_over_many_tiles(fusion, monkeypatch, device):
    if fusion == "off":
        monkeypatch.setenv("FLOWGRAD_NO_FUSION", "1")
    rng = np.random.default_rng(6)
    xs = [fg.tensor(rng.standard_normal((1000, 64)).astype(np.float32)).to(device) for _ in range(4)]

    def make():
        fg.manual_seed(0)
        model = Elementwise().to(device)
        return model, fg.optim.SGD(model.parameters(), lr=0.1)

    model, opt = make()
    eager = []
    for x in xs:
        opt.zero_grad()
        loss = model(x)
        loss.backward()
        opt.step()
        eager.append(loss.item())
    cmodel, copt = make()
    step = fg.compile(cmodel, optimizer=copt, example_inputs=(xs[0],))
    compiled = [step(x).item() for x in xs]
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    np.testing.assert_allclose(cmodel.fc.weight.cpu().numpy(), model.fc.weight.cpu().numpy(), rtol=1e-5, atol=1e-6)
    stats = step.stats
    cuda_fused = device != "cpu" and not stats["cuda_fusion"].startswith("not used")  # NVRTC and a driver
    if fusion == "on" and (device == "cpu" or cuda_fused):
        assert stats["fused"] >= 6 and stats["fused_runs"] >= 2 and stats["kernels"] < stats["instructions"]
    else:
        assert stats["fused"] == 0 and stats["kernels"] == stats["instructions"]
    assert overlapping_buffers(step.plan.buffers()) == []


@pytest.mark.parametrize("opt_name", [None, "adam"])
def test_frozen_model_compiles_to_a_forward_only_plan(opt_name, device):
    xs, ys = tensors(*data("mlp", np.random.default_rng(0), 2), device)
    model, opt, _ = build("mlp", OPTIMIZERS["adam"], device)
    for p in model.parameters():
        p.requires_grad = False
    saved = {n: p.cpu().numpy().copy() for n, p in model.named_parameters()}
    step = fg.compile(model, F.cross_entropy, opt if opt_name else None, example_inputs=(xs[0], ys[0]))
    assert step.forward_only
    for x, y in zip(xs, ys):
        loss = step(x, y).item()
        assert loss == pytest.approx(F.cross_entropy(model(x), y).item(), rel=1e-6)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.cpu().numpy(), saved[n], err_msg=n)  # nothing trains
        assert p.grad is None, n
    if opt_name:
        assert not opt.state  # no optimizer state made for a step that updates nothing
    model[0].weight.requires_grad = True  # unfreezing traces a training step again
    step(xs[0], ys[0])
    assert not step.forward_only and model[0].weight.grad is not None
    trained = not np.array_equal(model[0].weight.cpu().numpy(), saved["0.weight"])
    assert trained == bool(opt_name)

def test_functions_and_modules_without_parameters_compile(device):
    rng = np.random.default_rng(2)
    a, b, c, d = (fg.tensor(rng.standard_normal((6, 5)).astype(np.float32), device=device) for _ in range(4))
    step = fg.compile(lambda x, y: ((x - y) ** 2).mean(), example_inputs=(a, b))
    assert step.forward_only and step(c, d).item() == pytest.approx(float(((c.cpu().numpy() - d.cpu().numpy()) ** 2).mean()), rel=1e-6)
    summed = fg.compile(_Sum(), example_inputs=(a,))
    assert summed(c).item() == pytest.approx(float(c.cpu().numpy().sum()), rel=1e-5)


class ResidualNormBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner, self.branch, self.norm, self.head = nn.Linear(33, 64), nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 5)

    def forward(self, v):
        h = self.inner(v)
        return self.head(F.gelu(self.norm(h + self.branch(h))))


def test_norm_ops_write_over_the_operands_that_die_there(device, monkeypatch):
    """On the CPU add_layer_norm writes its sum over the branch's output and norm_backward its dx
    over the normalized sum, each dying there (the planner's in-place case; CUDA plans keep every
    result in bytes of its own): a residual block with a layer norm trains to the same bits as with
    every buffer in bytes of its own (FLOWGRAD_NO_PLANNER=1) and with released bytes poisoned
    (FLOWGRAD_DEBUG_PLAN=1)."""
    rng = np.random.default_rng(7)
    x = fg.tensor(rng.normal(size=(48, 33)).astype(np.float32), device=device)
    y = fg.tensor(rng.normal(size=(48, 5)).astype(np.float32), device=device)
    results = []
    for env in planner_modes(monkeypatch):
        fg.manual_seed(3)
        model = ResidualNormBlock().to(device)
        step = fg.compile(model, F.mse_loss, fg.optim.SGD(model.parameters(), lr=0.1), example_inputs=(x, y))
        buffers = step.plan.buffers()
        made_by = {out: r["op"] for r in step.ir() for out in r["outputs"]}
        taking = sorted(made_by[b["name"]] for b in buffers if b["takes"] is not None)
        in_place = device == "cpu" and not env.get("FLOWGRAD_NO_PLANNER")
        assert taking == (["add_layer_norm", "norm_backward"] if in_place else []), taking
        assert overlapping_buffers(buffers) == []
        losses = [step(x, y).item() for _ in range(3)]
        results.append((losses, [p.cpu().numpy().copy() for p in model.parameters()]))
    assert_trained_alike(results)


def test_in_place_ops_on_strided_targets_compile(device):
    """copy_ writes any layout (an optimizer writing back a transposed weight); any other in-place
    op on a strided target runs as op -> copy_ on a contiguous temporary, eagerly and in plans."""
    x = fg.tensor(np.arange(24, dtype=np.float32).reshape(6, 4), device=device)

    weights = np.arange(24, dtype=np.float32).reshape(4, 6) ** 2  # a sum that sees the layout
    w = fg.tensor(weights, device=device)

    def copy_into_transpose(x):
        y = fg.zeros(4, 6, device=device)
        y.t().copy_(x * 2)
        return ((y + 1) * w).sum()

    step = fg.compile(copy_into_transpose, example_inputs=(x,))
    expected = ((x.cpu().numpy().T * 2 + 1) * weights).sum()
    assert step(x).item() == copy_into_transpose(x).item() == expected

    def add_into_transpose(x):
        y = fg.zeros(4, 6, device=device)
        y.t().add_(x)
        return y.sum()

    step = fg.compile(add_into_transpose, example_inputs=(x,))
    assert step(x).item() == add_into_transpose(x).item() == x.cpu().numpy().sum()
    ops = [r["op"] for r in step.ir()]
    assert ops.count("copy_") == 1 and "add_" in ops
