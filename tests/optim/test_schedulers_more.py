"""MultiStepLR, ExponentialLR, LinearLR, OneCycleLR and SequentialLR: PyTorch's rates step by step (when PyTorch is installed)
and closed forms written here, state_dict resume, and the documented errors."""
import json
import math

import numpy as np
import pytest

import flowgrad as fg

S = fg.optim.lr_scheduler


def optimizer(lrs=(1.0, 0.5)):
    return fg.optim.SGD([{"params": [fg.nn.Parameter(fg.ones(2))], "lr": lr} for lr in lrs], lr=lrs[0])


def rates(sched, steps):
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr())
        sched.step()
    return np.array(out)


def torch_rates(make, steps, lrs=(1.0, 0.5)):
    torch = pytest.importorskip("torch")
    opt = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.ones(2))], "lr": lr} for lr in lrs], lr=lrs[0])
    sched = make(torch.optim.lr_scheduler, opt)
    out = []
    for _ in range(steps):
        out.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    return np.array(out)


CASES = {
    "multistep": (lambda m, o: m.MultiStepLR(o, milestones=[6, 2, 9], gamma=0.5), 12),
    "exponential": (lambda m, o: m.ExponentialLR(o, gamma=0.9), 10),
    "linear": (lambda m, o: m.LinearLR(o, start_factor=0.1, end_factor=0.9, total_iters=7), 12),
    "linear_default": (lambda m, o: m.LinearLR(o), 8),
    "one_cycle_cos": (lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=20), 20),
    "one_cycle_linear": (lambda m, o: m.OneCycleLR(o, max_lr=[0.3, 0.1], total_steps=17, pct_start=0.25,
                                                   anneal_strategy="linear"), 17),
    "one_cycle_three_phase": (lambda m, o: m.OneCycleLR(o, max_lr=2.0, total_steps=30, three_phase=True,
                                                        div_factor=10, final_div_factor=100), 30),
    # 15 steps: flowgrad's cosine stays at eta_min after T_max, PyTorch's climbs back
    "sequential": (lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.01, total_iters=4),
                                                   m.CosineAnnealingLR(o, T_max=9)], milestones=[5]), 15),
    "sequential_three": (lambda m, o: m.SequentialLR(o, [m.LinearLR(o, 0.5, 1.0, 2), m.StepLR(o, 2, 0.5),
                                                         m.LinearLR(o, 1.0, 0.1, 3)], milestones=[3, 8]), 14),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rates_are_pytorch_s(name):
    make, steps = CASES[name]
    np.testing.assert_allclose(rates(make(S, optimizer()), steps), torch_rates(make, steps), rtol=1e-12, atol=1e-15)


def test_closed_forms():
    np.testing.assert_allclose(rates(S.LinearLR(optimizer((2.0,)), 0.25, 1.0, 3), 5)[:, 0], [0.5, 1.0, 1.5, 2, 2])
    np.testing.assert_allclose(rates(S.MultiStepLR(optimizer((1.0,)), [3, 1], 0.1), 5)[:, 0], [1, 0.1, 0.1, 0.01, 0.01])
    np.testing.assert_allclose(rates(S.ExponentialLR(optimizer((2.0,)), 0.5), 4)[:, 0], [2, 1, 0.5, 0.25])
    one = rates(S.OneCycleLR(optimizer((9.0,)), max_lr=1.0, total_steps=11, pct_start=0.5,
                             anneal_strategy="linear", div_factor=4, final_div_factor=5), 11)[:, 0]
    up = [0.25 + 0.75 * k / 4.5 for k in range(5)]  # 0.25 -> 1 over steps 0..4.5
    down = [1.0 - (1.0 - 0.05) * (k - 4.5) / 5.5 for k in range(5, 11)]  # 1 -> 0.05 over 4.5..10
    np.testing.assert_allclose(one, up + down)
    seq = rates(S.SequentialLR(o := optimizer((1.0,)), [S.LinearLR(o, 0.5, 1.0, 2), S.StepLR(o, 1, 0.5)],
                               milestones=[3]), 6)[:, 0]
    np.testing.assert_allclose(seq, [0.5, 0.75, 1.0, 1.0, 0.5, 0.25])


def test_one_cycle_keeps_its_last_rate_one_step_past_the_end_then_raises():
    sched = S.OneCycleLR(opt := optimizer((1.0,)), max_lr=1.0, total_steps=5)
    for _ in range(4):
        sched.step()
    last = opt.param_groups[0]["lr"]
    assert math.isclose(last, 1.0 / 25 / 1e4)
    sched.step()
    assert opt.param_groups[0]["lr"] == last
    with pytest.raises(fg.InvalidArgumentError, match=r"OneCycleLR: stepped 6 times, past total_steps=5"):
        sched.step()


@pytest.mark.parametrize("name", ["multistep", "linear", "one_cycle_three_phase", "sequential", "sequential_three"])
def test_state_dict_resumes_the_schedule(name):
    make, steps = CASES[name]
    whole = rates(make(S, optimizer()), steps)
    first = make(S, optimizer())
    head = rates(first, 4)
    state = json.loads(json.dumps(first.state_dict()))  # plain JSON-able data
    resumed = make(S, optimizer())
    resumed.load_state_dict(state)
    np.testing.assert_allclose(np.concatenate([head, rates(resumed, steps - 4)]), whole, rtol=1e-15)


def test_errors_name_the_scheduler_and_the_bad_option():
    o = optimizer()
    with pytest.raises(fg.InvalidArgumentError, match=r"LinearLR: need 0 < start_factor <= 1, .*got start_factor=0,"):
        S.LinearLR(o, start_factor=0)
    with pytest.raises(fg.InvalidArgumentError, match=r"LinearLR: .*total_iters=0"):
        S.LinearLR(o, total_iters=0)
    with pytest.raises(fg.InvalidArgumentError, match=r"MultiStepLR: milestones must be non-negative ints, "
                                                      r"got \[-1, 2\]"):
        S.MultiStepLR(o, [2, -1])
    with pytest.raises(fg.InvalidArgumentError, match=r"ExponentialLR: gamma must be > 0, got 0"):
        S.ExponentialLR(o, 0)
    with pytest.raises(fg.InvalidArgumentError, match=r"OneCycleLR: 3 max_lr values for 2 param groups"):
        S.OneCycleLR(o, max_lr=[1, 2, 3], total_steps=10)
    with pytest.raises(fg.InvalidArgumentError, match=r"OneCycleLR: need an integer total_steps > 1, .*"
                                                      r"got total_steps=10.0"):
        S.OneCycleLR(o, max_lr=1.0, total_steps=10.0)
    with pytest.raises(fg.InvalidArgumentError, match=r"OneCycleLR: anneal_strategy must be 'cos' or 'linear', "
                                                      r"got 'exp'"):
        S.OneCycleLR(o, max_lr=1.0, total_steps=10, anneal_strategy="exp")
    a, b = S.LinearLR(o), S.StepLR(o, 3)
    with pytest.raises(fg.InvalidArgumentError, match=r"SequentialLR: need 1 increasing positive integer "
                                                      r"milestones for 2 schedulers, got \[3, 5\]"):
        S.SequentialLR(o, [a, b], milestones=[3, 5])
    with pytest.raises(fg.InvalidArgumentError, match=r"SequentialLR: expected epoch schedulers .*got "
                                                      r"ReduceLROnPlateau"):
        S.SequentialLR(o, [a, S.ReduceLROnPlateau(o)], milestones=[3])
    with pytest.raises(fg.InvalidArgumentError, match=r"SequentialLR: StepLR schedules another optimizer"):
        S.SequentialLR(o, [a, S.StepLR(optimizer(), 3)], milestones=[3])
    seq = S.SequentialLR(o, [a, b], milestones=[3])
    state = seq.state_dict()
    with pytest.raises(fg.InvalidArgumentError, match=r"SequentialLR.load_state_dict: expected last_epoch, "
                                                      r"milestones and 2 scheduler states"):
        seq.load_state_dict({**state, "schedulers": state["schedulers"][:1]})
    bad = {**state, "schedulers": [state["schedulers"][0], {**state["schedulers"][1], "step_size": -1}]}
    before = seq.state_dict()
    with pytest.raises(fg.InvalidArgumentError, match=r"StepLR: step_size must be positive, got -1"):
        seq.load_state_dict(bad)
    assert seq.state_dict() == before  # checked whole before anything was taken
