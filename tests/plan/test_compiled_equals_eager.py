"""A compiled step trains exactly as the eager loop it replaces (issue 34): one regression test per
defect the differential fuzzer found, and the constructs that used to be refused. Each compares
float64 parameters, optimizer state and .grad with an eager twin built from the same seed."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def twins(build):
    """Two copies of (model, optimizer) from the same seed."""
    fg.manual_seed(0)
    a = build()
    fg.manual_seed(0)
    return a, build()


def eager_step(model, opt, x, y, loss_fn=F.cross_entropy, before_step=None):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    if before_step is not None:
        before_step(model)
    opt.step()
    return loss.item()


def batches(n, shape=(6, 4), classes=3, device="cpu", seed=0):
    rng = np.random.default_rng(seed)
    return [(fg.tensor(rng.standard_normal(shape), device=device), fg.tensor(rng.integers(0, classes, shape[0]), device=device))
            for _ in range(n)]


def assert_same_params(a, b, rtol=1e-12):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(q.cpu().numpy(), p.cpu().numpy(), rtol=rtol, atol=1e-14, err_msg=name)


def assert_same_state(oa, ob):
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        assert sa[i].keys() == sb[i].keys()
        for k in sa[i]:
            np.testing.assert_allclose(sb[i][k].cpu().numpy().astype(float), sa[i][k].cpu().numpy().astype(float),
                                       rtol=1e-12, atol=1e-14, err_msg=f"{i}.{k}")


def mlp(device="cpu"):
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).to(fg.float64).to(device)


# ---- crashes ----

def test_dead_switch_result_compiles():
    """The dead-code pass drops a switch whose result nobody reads; the plan runs without it."""
    code = """
import flowgrad as fg, flowgrad.nn.functional as F
from flowgrad import nn
fg.manual_seed(0)
g = (fg.FlowBuilder(nn.Linear(3, 4)).tag("in")
     .switch(fg.flow.ArgmaxSelector(4, 2), nn.Linear(4, 4), nn.Linear(4, 4))
     .map(nn.Linear(4, 4)).over("in").through(nn.Linear(4, 2)).build())
x, y = fg.randn(5, 3), fg.randint(0, 2, (5,))
step = fg.compile(g, F.cross_entropy, fg.optim.SGD(g.parameters(), lr=0.1), example_inputs=(x, y))
assert not any(r["op"] == "switch" for r in step.explain().rows), "the dead switch is still in the plan"
print(step(x, y).item())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("make", [lambda: nn.Linear(4, 3, bias=False), lambda: nn.Conv2d(2, 3, 3, bias=False),
                                  lambda: nn.GroupNorm(1, 4, affine=False),
                                  lambda: nn.BatchNorm1d(4, track_running_stats=False)])
def test_module_to_dtype_leaves_undefined_parameters_alone(make, device):
    m = make()
    m.to(fg.float64)
    m.to(device)
    for _, t in list(m.named_parameters()) + list(m.named_buffers()):
        assert str(t.device).startswith(device)
        assert t.dtype == fg.float64 or not t.dtype.is_floating_point
    m.float()
    assert all(p.dtype == fg.float32 for p in m.parameters())


# ---- silently different training ----

@pytest.mark.parametrize("make_opt", [
    lambda ps: fg.optim.Adagrad(ps, lr=0.1, weight_decay=0.1),
    lambda ps: fg.optim.RMSprop(ps, lr=0.01, momentum=0.5, weight_decay=0.1, centered=True),
    lambda ps: fg.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda ps: fg.optim.AdamW(ps, lr=0.1, weight_decay=0.1),
    lambda ps: fg.optim.ClipGradNorm(fg.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1), 0.05)],
    ids=["adagrad", "rmsprop", "sgd", "adamw", "clipped-sgd"])
def test_no_optimizer_updates_an_untaken_switch_branch(make_opt, device):
    def build():
        g = (fg.FlowBuilder(nn.Linear(3, 4))
             .switch(fg.flow.FixedSelector(0), nn.Linear(4, 4), nn.Linear(4, 4))
             .through(nn.Linear(4, 2)).build()).to(fg.float64).to(device)
        return g, make_opt(g.parameters())
    (ge, oe), (gc, oc) = twins(build)
    data = batches(3, (5, 3), 2, device)
    step = fg.compile(gc, F.cross_entropy, oc, example_inputs=data[0])
    for x, y in data:
        eager_step(ge, oe, x, y)
        step(x, y)
    assert_same_params(ge, gc)
    assert_same_state(oe, oc)


def test_recurrent_state_is_carried_between_compiled_calls():
    def build():
        g = (fg.flow(nn.Linear(3, 4)).through(fg.flow.Add()).using("st").through(nn.Tanh()).tag("st")
             .through(nn.Linear(4, 2)).build()).to(fg.float64)
        return g, fg.optim.SGD(g.parameters(), lr=0.1)
    (ge, oe), (gc, oc) = twins(build)
    data = batches(4, (5, 3), 2)
    step = fg.compile(gc, F.cross_entropy, oc, example_inputs=data[0])
    for x, y in data[:3]:
        assert step(x, y).item() == pytest.approx(eager_step(ge, oe, x, y), rel=1e-12)
        ge.detach_state()
    np.testing.assert_allclose(gc._recurrent_state()["st"].cpu().numpy(), ge._recurrent_state()["st"].cpu().numpy(), rtol=1e-12)
    ge.reset_state(), gc.reset_state()  # seen by the step: it starts from zeros again
    x, y = data[3]
    assert step(x, y).item() == pytest.approx(eager_step(ge, oe, x, y), rel=1e-12)
    assert_same_params(ge, gc)


def sgd_twins():
    return twins(lambda: (lambda m: (m, fg.optim.SGD(m.parameters(), lr=0.1)))(mlp()))


def test_freezing_reaches_every_cached_plan_of_a_dynamic_step():
    (me, oe), (mc, oc) = sgd_twins()
    rng = np.random.default_rng(0)
    data = [(fg.tensor(rng.standard_normal((n, 4))), fg.tensor(rng.integers(0, 3, n))) for n in (4, 5, 4, 5, 4)]
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0], dynamic=True)
    for i, (x, y) in enumerate(data):
        for m in (me, mc):
            m[0].bias.requires_grad = i not in (1, 2)  # frozen for calls 1 and 2, then trained again
        eager_step(me, oe, x, y)
        step(x, y)
        assert_same_params(me, mc)


def test_freezing_reaches_every_bucket_plan():
    (me, oe), (mc, oc) = sgd_twins()
    rng = np.random.default_rng(0)
    xs = [fg.tensor(rng.standard_normal((2, n, 4))) for n in (4, 8, 4)]

    def loss_of(m, x):
        return (m(x) ** 2).mean()
    step = fg.compile(lambda x: loss_of(mc, x), None, oc, example_inputs=(xs[0],), dynamic=True, buckets=[4, 8],
                      pad_values=(0.0,))
    for i, x in enumerate(xs):
        if i == 1:
            me[0].bias.requires_grad = mc[0].bias.requires_grad = False
        eager_step(me, oe, x, None, loss_fn=lambda out, _: (out ** 2).mean())
        step(x)
        assert_same_params(me, mc)


@pytest.mark.parametrize("how", ["load_state_dict", "checkpoint"])
def test_optimizer_state_loaded_after_compiling_is_used(how):
    data = batches(6)
    m0 = mlp()
    o0 = fg.optim.Adam(m0.parameters(), lr=0.01)
    for x, y in data[:3]:
        eager_step(m0, o0, x, y)
    path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    fg.save_checkpoint(path, m0, o0, step=3)

    def resume(m, o):
        if how == "checkpoint":
            fg.load_checkpoint(path, m, o)
        else:
            m.load_state_dict(m0.state_dict())
            o.load_state_dict(o0.state_dict())

    (me, oe), (mc, oc) = twins(lambda: (lambda m: (m, fg.optim.Adam(m.parameters(), lr=0.01)))(mlp()))
    resume(me, oe)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    resume(mc, oc)
    for x, y in data[3:5]:
        assert step(x, y).item() == pytest.approx(eager_step(me, oe, x, y), rel=1e-12)
    for o in (oe, oc):  # an lr change after the reload is seen too
        for g in o.param_groups:
            g["lr"] = 0.0
    before = [p.cpu().numpy().copy() for p in mc.parameters()]
    step(*data[5])
    for p, b in zip(mc.parameters(), before):
        np.testing.assert_array_equal(p.cpu().numpy(), b)
    assert int(oc.state_dict()["state"][0]["step"].item()) == 6  # 3 loaded + 3 compiled


def test_param_group_added_after_compiling_trains():
    def build():
        m = mlp()
        return m, fg.optim.SGD(list(m[2].parameters()), lr=0.1, momentum=0.9)
    (me, oe), (mc, oc) = twins(build)
    data = batches(4)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    for i, (x, y) in enumerate(data):
        if i == 2:
            oe.add_param_group({"params": list(me[0].parameters()), "lr": 0.05})
            oc.add_param_group({"params": list(mc[0].parameters()), "lr": 0.05})
        eager_step(me, oe, x, y)
        step(x, y)
    assert_same_params(me, mc)
    assert_same_state(oe, oc)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_grad_shows_the_step_after_zero_grad(set_to_none, device):
    (me, oe), (mc, oc) = twins(lambda: (lambda m: (m, fg.optim.Adam(m.parameters(), lr=0.01)))(mlp(device)))
    data = batches(3, device=device)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    for x, y in data:
        oe.zero_grad(set_to_none=set_to_none)
        F.cross_entropy(me(x), y).backward()
        oe.step()
        oc.zero_grad(set_to_none=set_to_none)
        step(x, y)
        for p, q in zip(me.parameters(), mc.parameters()):
            assert q.grad is not None
            np.testing.assert_allclose(q.grad.cpu().numpy(), p.grad.cpu().numpy(), rtol=1e-12, atol=1e-14)


def test_flow_graph_with_an_input_compiles_and_labels_its_modules():
    def build():
        g = (fg.flow(nn.Linear(3, 4)).input("ctx").through(fg.flow.Add()).using("ctx")
             .through(nn.Linear(4, 2)).build()).to(fg.float64)
        return g, fg.optim.SGD(g.parameters(), lr=0.1)
    (ge, oe), (gc, oc) = twins(build)
    rng = np.random.default_rng(0)
    data = [tuple(fg.tensor(a) for a in (rng.standard_normal((5, 3)), rng.standard_normal((5, 4)))) +
            (fg.tensor(rng.integers(0, 2, 5)),) for _ in range(3)]
    step = fg.compile(gc, F.cross_entropy, oc, example_inputs=data[0])
    for x, ctx, y in data:
        oe.zero_grad()
        loss = F.cross_entropy(ge(x, ctx), y)
        loss.backward()
        oe.step()
        assert step(x, ctx, y).item() == pytest.approx(loss.item(), rel=1e-12)
    assert_same_params(ge, gc)
    assert any(r["module"] for r in step.explain().rows)


# ---- what used to be refused ----

def test_sgd_momentum_set_after_creation():
    (me, oe), (mc, oc) = twins(lambda: (lambda m: (m, fg.optim.SGD(m.parameters(), lr=0.1)))(mlp()))
    data = batches(4)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    for i, (x, y) in enumerate(data):
        if i == 2:
            for o in (oe, oc):
                o.param_groups[0]["momentum"] = 0.9
        eager_step(me, oe, x, y)
        step(x, y)
    assert_same_params(me, mc)
    assert_same_state(oe, oc)
    assert oe.state_dict()["state"][0]["momentum_buffer"] is not None


def test_clip_grad_norm_inside_a_compiled_step(device):
    (me, oe), (mc, oc) = twins(lambda: (lambda m: (m, fg.optim.ClipGradNorm(fg.optim.SGD(m.parameters(), lr=0.5), 0.1)))(mlp(device)))
    data = batches(3, device=device)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    for x, y in data:
        eager_step(me, oe, x, y)
        assert oe.last_norm.item() > 0.1  # every step clipped
        step(x, y)
        assert_same_params(me, mc)
        for p, q in zip(me.parameters(), mc.parameters()):  # .grad: the unclipped gradients in both
            np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.cpu().numpy(), rtol=1e-6, atol=1e-7)
    assert step.stats["host_syncs"] == 0


def test_clip_grad_norm_returns_the_norm_on_the_device_and_checks_max_norm(device):
    a = fg.zeros(3, dtype=fg.float64, device=device, requires_grad=True)
    a.grad = fg.tensor(np.array([3.0, 4.0, 0.0]), device=device)
    norm = fg.nn.utils.clip_grad_norm_([a], 1.0)
    assert norm.ndim == 0 and norm.dtype == fg.float32 and str(norm.device).startswith(device)
    assert norm.item() == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.cpu().numpy(), [3 / (5 + 1e-6), 4 / (5 + 1e-6), 0.0], rtol=1e-12)
    with pytest.raises(fg.InvalidArgumentError, match="max_norm must be positive"):
        fg.nn.utils.clip_grad_norm_([a], 0.0)


def test_batch_norm_cumulative_average_compiles():
    def build():
        m = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5, momentum=None), nn.Linear(5, 3)).to(fg.float64)
        return m, fg.optim.SGD(m.parameters(), lr=0.1)
    (me, oe), (mc, oc) = twins(build)
    data = batches(4)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    for x, y in data:
        assert step(x, y).item() == pytest.approx(eager_step(me, oe, x, y), rel=1e-12)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(mc[1], name).cpu().numpy(), getattr(me[1], name).cpu().numpy(), rtol=1e-12)
    assert int(mc[1].num_batches_tracked.item()) == 4


def test_host_built_constant_in_forward_is_folded():
    mask = np.tril(np.ones((6, 3)))

    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x) * fg.tensor(mask)  # built from host data on every call

    (me, oe), (mc, oc) = twins(lambda: (lambda m: (m, fg.optim.SGD(m.parameters(), lr=0.1)))(Masked().to(fg.float64)))
    data = batches(3)
    step = fg.compile(mc, F.cross_entropy, oc, example_inputs=data[0])
    for x, y in data:
        assert step(x, y).item() == pytest.approx(eager_step(me, oe, x, y), rel=1e-12)
    assert_same_params(me, mc)


def test_host_built_constant_written_in_place_raises():
    class Writes(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            m = fg.tensor(np.ones(3))
            m.mul_(2.0)
            return self.fc(x) * m

    with pytest.raises(fg.InvalidArgumentError, match="a constant the step built from host data"):
        fg.compile(Writes().to(fg.float64), F.cross_entropy, None, example_inputs=batches(1, (6, 4))[0])
