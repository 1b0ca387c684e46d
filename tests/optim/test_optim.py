"""Optimizers against reference formulas written here, param groups, state_dict, schedulers,
gradient clipping."""
import json
import math

import numpy as np
import pytest

import flowgrad as fg


def quadratic_setup(rng, n=5):
    target = rng.standard_normal(n)
    p = fg.tensor(rng.standard_normal(n), dtype=fg.float64, requires_grad=True)
    return p, target


def grad_of(p, target):
    p.grad = None
    ((p - fg.tensor(target)) ** 2).sum().backward()
    return p.grad.numpy().copy()


@pytest.mark.parametrize("momentum,nesterov,wd,damp", [(0, False, 0, 0), (0.9, False, 0.1, 0), (0.9, True, 0.01, 0), (0.8, False, 0, 0.3)])
def test_sgd_matches_reference(rng, momentum, nesterov, wd, damp):
    p, target = quadratic_setup(rng)
    ref = p.detach().numpy().copy()
    opt = fg.optim.SGD([p], lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd, dampening=damp)
    buf = None
    for _ in range(5):
        g = grad_of(p, target) + wd * ref
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - damp) * g
            g = g + momentum * buf if nesterov else buf
        ref = ref - 0.1 * g
        opt.step()
        np.testing.assert_allclose(p.detach().numpy(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls,wd", [(fg.optim.Adam, 0.0), (fg.optim.Adam, 0.1), (fg.optim.AdamW, 0.1)])
def test_adam_adamw_match_reference(rng, cls, wd):
    p, target = quadratic_setup(rng)
    ref = p.detach().numpy().copy()
    opt = cls([p], lr=0.05, betas=(0.8, 0.95), eps=1e-8, weight_decay=wd)
    m = v = np.zeros_like(ref)
    for t in range(1, 7):
        g = grad_of(p, target)
        if cls is fg.optim.AdamW:
            ref = ref * (1 - 0.05 * wd)
        else:
            g = g + wd * ref
        m = 0.8 * m + 0.2 * g
        v = 0.95 * v + 0.05 * g * g
        ref = ref - 0.05 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.95 ** t)) + 1e-8)
        opt.step()
        np.testing.assert_allclose(p.detach().numpy(), ref, rtol=1e-10, atol=1e-12)


def test_param_groups_have_their_own_options_and_skip_missing_grads(rng):
    a = fg.ones(3, requires_grad=True)
    b = fg.ones(3, requires_grad=True)
    c = fg.ones(3, requires_grad=True)
    opt = fg.optim.SGD([{"params": [a], "lr": 1.0}, {"params": [b, c]}], lr=0.1)
    (a.sum() + b.sum()).backward()
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), 0.0)
    np.testing.assert_allclose(b.detach().numpy(), 0.9)
    np.testing.assert_array_equal(c.detach().numpy(), 1.0)  # no gradient: untouched
    assert opt.param_groups[1]["lr"] == 0.1
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), [0, 0, 0])
    assert c.grad is None  # never had one
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(fg.InvalidArgumentError, match="a parameter appears in more than one group"):
        fg.optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    with pytest.raises(fg.InvalidArgumentError, match="unknown options \\['betas'\\]"):
        fg.optim.SGD([{"params": [a], "betas": (0.9, 0.9)}], lr=0.1)
    with pytest.raises(fg.InvalidArgumentError, match="empty parameter list"):
        fg.optim.Adam([])


def test_optimizer_state_dict_round_trip_resumes_exactly(rng):
    def make():
        fg.manual_seed(0)
        model = fg.nn.Linear(4, 2)
        return model, fg.optim.AdamW(model.parameters(), lr=0.01)

    x = fg.tensor(rng.standard_normal((8, 4)).astype(np.float32))

    def train(model, opt, steps):
        for _ in range(steps):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()

    m1, o1 = make()
    train(m1, o1, 6)
    m2, o2 = make()
    train(m2, o2, 3)
    sd_model, sd_opt = m2.state_dict(), o2.state_dict()
    assert sd_opt["state"][0]["step"].item() == 3 and sd_opt["param_groups"][0]["params"] == [0, 1]
    m3, o3 = make()
    m3.load_state_dict(sd_model)
    o3.load_state_dict(sd_opt)
    train(m3, o3, 3)
    for p, q in zip(m1.parameters(), m3.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    with pytest.raises(fg.InvalidArgumentError, match="saved groups do not match"):
        fg.optim.Adam([fg.ones(2, requires_grad=True)]).load_state_dict(sd_opt)


def test_clip_grad_norm(rng):
    a = fg.tensor([3.0, 0.0], requires_grad=True)
    b = fg.tensor([4.0], requires_grad=True)
    (a * a / 2).sum().backward()
    (b * b / 2).sum().backward()
    norm = fg.nn.utils.clip_grad_norm_([a, b], 1.0)
    assert abs(norm.item() - 5.0) < 1e-6
    total = np.sqrt((a.grad.numpy() ** 2).sum() + (b.grad.numpy() ** 2).sum())
    assert abs(total - 1.0) < 1e-5
    fg.nn.utils.clip_grad_norm_([a, b], 10.0)  # already small: unchanged
    assert abs(np.sqrt((a.grad.numpy() ** 2).sum() + (b.grad.numpy() ** 2).sum()) - 1.0) < 1e-5
    with pytest.raises(fg.InvalidArgumentError, match="max_norm must be positive"):
        fg.nn.utils.clip_grad_norm_([a], 0)


def test_shared_gradients_do_not_alias_between_leaves():
    a = fg.ones(3, requires_grad=True)
    b = fg.ones(3, requires_grad=True)
    (a + b).sum().backward()  # add hands one gradient tensor to both inputs
    assert a.grad.data_ptr() != b.grad.data_ptr()
    with fg.no_grad():
        a.grad.fill_(5.0)
    np.testing.assert_array_equal(b.grad.numpy(), [1, 1, 1])


def lrs(scheduler, epochs):
    out = []
    for _ in range(epochs):
        out.append(scheduler.get_last_lr()[0])
        scheduler.step()
    return out


def test_schedulers():
    p = fg.ones(1, requires_grad=True)
    opt = fg.optim.SGD([p], lr=1.0)
    np.testing.assert_allclose(lrs(fg.optim.lr_scheduler.StepLR(opt, 2, 0.5), 5), [1, 1, 0.5, 0.5, 0.25])
    opt = fg.optim.SGD([p], lr=1.0)
    cos = lrs(fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.1, warmup=2), 11)
    np.testing.assert_allclose(cos[:2], [0.5, 1.0])
    np.testing.assert_allclose(cos[2:], [0.1 + 0.9 * (1 + math.cos(math.pi * t / 8)) / 2 for t in range(9)])
    opt = fg.optim.SGD([p], lr=2.0)
    np.testing.assert_allclose(lrs(fg.optim.lr_scheduler.LambdaLR(opt, lambda e: 1 / (e + 1)), 3), [2, 1, 2 / 3])
    opt = fg.optim.SGD([p], lr=1.0)
    plateau = fg.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=2, factor=0.5)
    for v in [5, 4, 4, 4, 4, 3, 3, 3, 3]:
        plateau.step(v)
    assert opt.param_groups[0]["lr"] == 0.25

    class FakeTrend:
        def __init__(self):
            self.values = []

        def latest(self):
            return self.values[-1]

    trend = FakeTrend()
    opt = fg.optim.SGD([p], lr=1.0)
    plateau = fg.optim.lr_scheduler.ReduceLROnPlateau(opt, trend=trend, patience=0, factor=0.1)
    for v in [1.0, 1.0]:
        trend.values.append(v)
        plateau.step()
    assert abs(opt.param_groups[0]["lr"] - 0.1) < 1e-12
    with pytest.raises(fg.InvalidArgumentError, match="CosineAnnealingLR: need T_max > 0"):
        fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5, warmup=5)


SCHEDULERS = {
    "StepLR": lambda opt: fg.optim.lr_scheduler.StepLR(opt, 3, 0.5),
    "CosineAnnealingLR": lambda opt: fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01, warmup=3),
    "LambdaLR": lambda opt: fg.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9 ** e),
    "ReduceLROnPlateau": lambda opt: fg.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5),
}
PLATEAU_VALUES = [5, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2]


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_scheduler_state_dict_resumes_the_schedule(kind):
    def fresh(lr):
        opt = fg.optim.SGD([fg.ones(2, requires_grad=True)], lr=lr)
        return opt, SCHEDULERS[kind](opt)

    def steps(scheduler, values):
        out = []
        for v in values:
            scheduler.step(v) if kind == "ReduceLROnPlateau" else scheduler.step()
            out.append(scheduler.get_last_lr()[0])
        return out

    opt, sched = fresh(1.0)
    straight = steps(sched, PLATEAU_VALUES)
    opt, sched = fresh(1.0)
    first = steps(sched, PLATEAU_VALUES[:6])
    saved = json.loads(json.dumps({"opt": opt.state_dict()["param_groups"], "sched": sched.state_dict()}))
    opt, sched = fresh(0.3)
    opt.load_state_dict({"state": {}, "param_groups": saved["opt"]})  # the lr a plateau scheduler has set
    sched.load_state_dict(saved["sched"])
    assert sched.get_last_lr() == [first[-1]]
    assert first + steps(sched, PLATEAU_VALUES[6:]) == straight
    assert len(set(straight)) > 2  # the schedule did move


def test_scheduler_load_state_dict_checks_before_taking():
    opt = fg.optim.SGD([fg.ones(1, requires_grad=True)], lr=1.0)
    cos = fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, warmup=2)
    cos.step()
    good = cos.state_dict()
    for state, message in [({**good, "extra": 1}, "CosineAnnealingLR.load_state_dict: expected the keys"),
                           ({k: v for k, v in good.items() if k != "T_max"}, "expected the keys"),
                           ([1, 2], "expected the keys"),
                           ({**good, "base_lrs": [1.0, 2.0]}, "values of the wrong kind or length"),
                           ({**good, "last_epoch": "3"}, "values of the wrong kind or length"),
                           ({**good, "T_max": 2, "warmup": 2}, "need T_max > 0 and 0 <= warmup < T_max")]:
        with pytest.raises(fg.InvalidArgumentError, match=message):
            cos.load_state_dict(state)
        assert cos.state_dict() == good and opt.param_groups[0]["lr"] == cos.lr_at(1.0, 1)
    plateau = fg.optim.lr_scheduler.ReduceLROnPlateau(opt)
    with pytest.raises(fg.InvalidArgumentError, match="mode must be 'min' or 'max', got 'up'"):
        plateau.load_state_dict({**plateau.state_dict(), "mode": "up"})
    with pytest.raises(fg.InvalidArgumentError, match="StepLR: step_size must be positive"):
        fg.optim.lr_scheduler.StepLR(opt, 3).load_state_dict({**fg.optim.lr_scheduler.StepLR(opt, 3).state_dict(),
                                                              "step_size": 0})


def test_hyper_slots_are_the_ones_the_update_kernels_read():
    # The optimizer publishes its slot names (fg::optim::sgd_slots / adam_slots); the binding only converts.
    assert fg._core.optim.SGD_SLOTS == ("lr", "momentum", "dampening", "weight_decay", "nesterov", "first", "maximize")
    assert fg._core.optim.ADAM_SLOTS == ("lr", "beta1", "beta2", "eps", "weight_decay", "decoupled", "maximize")


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_state_dict_keeps_its_keys_and_hyper_parameters(kind):
    p = fg.tensor([1.0, -2.0], dtype=fg.float64, requires_grad=True)
    if kind == "sgd":
        opt = fg.optim.SGD([p], lr=0.5, momentum=0.9, dampening=0.1, weight_decay=0.01)
        expected = dict(lr=0.5, momentum=0.9, dampening=0.1, nesterov=False, weight_decay=0.01)
        keys = {"momentum_buffer"}
    else:
        opt = fg.optim.AdamW([p], lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.02)
        expected = dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.02)
        keys = {"step", "exp_avg", "exp_avg_sq"}
    (p * p).sum().backward()
    opt.step()
    sd = opt.state_dict()
    group = sd["param_groups"][0]
    for name, value in expected.items():
        assert tuple(group[name]) == value if isinstance(value, tuple) else group[name] == value, name
    assert set(sd["state"][0]) == keys


class _Affine(fg.nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.w = fg.nn.Parameter(w)
        self.b = fg.nn.Parameter(b)

    def forward(self, x):
        # The product on a contiguous copy: the BLAS rounds x @ w by w's layout at some levels
        # (OpenBLAS's Haswell and SSE kernels), and the parameters' layouts are the optimizer's concern.
        return x @ self.w.contiguous() + self.b


STRIDED_OPTIMIZERS = {
    "sgd": lambda ps, f: fg.optim.SGD(ps, lr=0.1, foreach=f),
    "sgd_momentum": lambda ps, f: fg.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=f),
    "adamw": lambda ps, f: fg.optim.AdamW(ps, lr=0.05, weight_decay=0.1, foreach=f),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("name", list(STRIDED_OPTIMIZERS))
def test_strided_parameters_train_like_contiguous_ones(device, name, foreach, compiled):
    """A transposed weight and a strided bias are updated in place (PyTorch accepts them too):
    the same bits as contiguous parameters holding the same values, the parameters keep their
    storage and layout, and their versions move."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    strided = _Affine(fg.tensor(w, device=device).t(), fg.tensor(b, device=device)[::2])
    plain = _Affine(fg.tensor(w.T.copy(), device=device), fg.tensor(b[::2].copy(), device=device))
    assert not strided.w.is_contiguous() and not strided.b.is_contiguous()
    pointer, version = strided.w.data_ptr(), strided.w._version
    xs = [fg.tensor(rng.standard_normal((3, 6)).astype(np.float32), device=device) for _ in range(3)]
    ys = [fg.tensor(rng.standard_normal((3, 5)).astype(np.float32), device=device) for _ in range(3)]
    results = []
    for model in (strided, plain):
        opt = STRIDED_OPTIMIZERS[name](list(model.parameters()), foreach)
        if compiled:
            step = fg.compile(model, fg.nn.functional.mse_loss, opt, example_inputs=(xs[0], ys[0]))
        for x, y in zip(xs, ys):
            if compiled:
                step(x, y)
            else:
                opt.zero_grad()
                fg.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        results.append([p.detach().cpu().numpy() for p in model.parameters()])
    for s, p in zip(*results):
        np.testing.assert_array_equal(s, p)
    assert not np.array_equal(results[0][0], w.T)  # the steps did update
    assert strided.w.data_ptr() == pointer and not strided.w.is_contiguous()
    assert strided.w._version > version
