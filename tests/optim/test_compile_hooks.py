"""The public hooks fg.compile uses on an optimizer (plan_state, traced_step, run_compiled): each
checked on its own, against the eager step it stands for."""
import numpy as np
import pytest

import flowgrad as fg


def params_and_grads(device, seed=0, shapes=((3, 2), (4,), (1, 5))):
    fg.manual_seed(seed)
    params = [fg.randn(*s, dtype=fg.float64, device=device, requires_grad=True) for s in shapes]
    grads = [fg.randn(*s, dtype=fg.float64, device=device) for s in shapes]
    return params, grads


def test_plan_state_creates_and_labels_the_state(device):
    params, _ = params_and_grads(device)
    opt = fg.optim.Adam([{"params": params[:2]}, {"params": params[2:], "lr": 0.5}])
    assert opt.state == {}
    state, names = opt.plan_state()
    labels = [label for label, _ in names]
    assert labels == ["hyper0", "hyper1", "exp_avg[0]", "exp_avg[1]", "exp_avg_sq[0]", "exp_avg_sq[1]", "step[0]",
                      "step[1]", "exp_avg[2]", "exp_avg_sq[2]", "step[2]"]
    assert len(state) == 9 and all(any(t is s for _, s in names) for t in state)
    assert all(any(t is opt.state[params[0]][k] for t in state) for k in ("exp_avg", "exp_avg_sq", "step"))
    hyper1 = dict(names)["hyper1"].cpu().numpy()
    assert hyper1.dtype == np.float64 and hyper1[0] == 0.5  # the group's lr, written on return


def test_plan_state_skips_state_an_option_does_without(device):
    params, _ = params_and_grads(device)
    state, names = fg.optim.SGD(params, lr=0.1).plan_state()  # no momentum: no buffers
    assert state == [] and [label for label, _ in names] == ["hyper0"]


@pytest.mark.parametrize("make", [lambda p: fg.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: fg.optim.AdamW(p, lr=0.1)])
def test_traced_step_is_the_eager_step_and_leaves_grad_alone(device, make):
    params, grads = params_and_grads(device)
    twins = [p.detach().clone().requires_grad_(True) for p in params]
    eager, traced = make(twins), make(params)
    for p, g in zip(twins, grads):
        p.grad = g
    eager.step()
    traced.plan_state()
    traced.run_compiled(lambda: traced.traced_step(grads))
    for p, q in zip(params, twins):
        np.testing.assert_array_equal(p.detach().cpu().numpy(), q.detach().cpu().numpy())
        assert p.grad is None


@pytest.mark.parametrize("foreach", [True, False])
def test_traced_step_records_the_update_ops_foreach_names(device, foreach):
    params, grads = params_and_grads(device)
    opt = fg.optim.Adam(params, foreach=foreach)
    state, _ = opt.plan_state()
    tracer = fg._core.plan.Tracer()
    with tracer:
        opt.traced_step(grads[:2] + [None])  # None: no update for that parameter
    text = str(fg._core.plan.Plan(tracer, [], [], [], [], params + state))
    if foreach:  # one multi-tensor op for the group's two parameters with a gradient
        assert text.count("adam_update_multi(") == 1 and "adam_update(" not in text
        assert text.count("ext") == 11  # hyper, then (param, grad, step, exp_avg, exp_avg_sq) twice
    else:
        assert text.count("adam_update(") == 2 and "adam_update_multi" not in text


def test_run_compiled_writes_the_current_options_before_the_run(device):
    params, grads = params_and_grads(device)
    opt = fg.optim.SGD(params, lr=0.1)
    _, names = opt.plan_state()
    opt.param_groups[0]["lr"] = 0.25  # as a scheduler would
    seen = opt.run_compiled(lambda: dict(names)["hyper0"].cpu().numpy()[0])
    assert seen == 0.25


def test_traced_step_wants_one_gradient_per_parameter(device):
    params, grads = params_and_grads(device)
    opt = fg.optim.SGD(params, lr=0.1)
    with pytest.raises(fg.InvalidArgumentError, match=r"SGD.traced_step: got 2 gradients for 3 parameters"):
        opt.traced_step(grads[:2])
