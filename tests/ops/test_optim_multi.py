"""Multi-tensor optimizer updates (sgd_update_multi, sgd_momentum_update_multi,
adam_update_multi): bitwise the numbers of one sgd_update / adam_update per parameter."""
import numpy as np
import pytest

import flowgrad as fg

SHAPES = [(45, 65), (7,), (1, 5), (3, 1, 4), (0, 3), (), (130, 3), (2, 2)] * 3  # 24 parameters
MANY = SHAPES * 7  # 168 parameters (GPT-2 small has 148): one op, three CUDA tables of at most 64


def make_params(device, dtype, seed, shapes=SHAPES):
    fg.manual_seed(seed)
    params = [fg.randn(*s, dtype=dtype, device=device, requires_grad=True) for s in shapes]
    return params


def set_grads(params, step):
    for i, p in enumerate(params):
        if i % 7 == 3:
            p.grad = None  # parameters without a gradient are skipped
        else:
            fg.manual_seed(1000 * step + i)
            p.grad = fg.randn(*p.shape, dtype=p.dtype, device=p.device)


def run(make_opt, device, dtype, foreach, steps=4, shapes=SHAPES):
    params = make_params(device, dtype, seed=5, shapes=shapes)
    opt = make_opt(params, foreach)
    for step in range(steps):
        set_grads(params, step)
        opt.param_groups[0]["lr"] *= 0.9  # the hyper-parameter tensor is re-read every step
        opt.step()
    return [p.detach().cpu().numpy().copy() for p in params], opt


OPTIMIZERS = {
    "sgd": lambda ps, f: fg.optim.SGD(ps, lr=0.1, foreach=f),
    "sgd_momentum": lambda ps, f: fg.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=f),
    "sgd_nesterov": lambda ps, f: fg.optim.SGD(ps, lr=0.1, momentum=0.8, nesterov=True, foreach=f),
    "adam": lambda ps, f: fg.optim.Adam(ps, lr=0.01, weight_decay=0.1, foreach=f),
    "adamw": lambda ps, f: fg.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=f),
}


@pytest.mark.parametrize("shapes", [SHAPES, MANY], ids=["24", "168"])
@pytest.mark.parametrize("dtype", [fg.float32, fg.float64])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_multi_tensor_updates_are_bitwise_per_parameter_updates(device, dtype, name, shapes):
    multi, opt_multi = run(OPTIMIZERS[name], device, dtype, foreach=True, shapes=shapes)
    single, opt_single = run(OPTIMIZERS[name], device, dtype, foreach=False, shapes=shapes)
    start = [p.detach().cpu().numpy() for p in make_params(device, dtype, seed=5, shapes=shapes)]
    for m, s, p0 in zip(multi, single, start):
        np.testing.assert_array_equal(m, s)
    assert any(not np.array_equal(m, p0) for m, p0 in zip(multi, start))  # the steps did update
    for state_m, state_s in zip(opt_multi.state.values(), opt_single.state.values()):
        for key in state_m:
            if state_m[key] is not None:
                np.testing.assert_array_equal(state_m[key].cpu().numpy(), state_s[key].cpu().numpy())


@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_threads_split_the_concatenated_elements_anywhere(name):
    """Items past the updates' grain (1 << 14 elements): the threads' ranges cut items in the middle,
    size-0 items between them; bitwise per-parameter updates with 1 and 2 threads."""
    shapes = [(300, 500), (7,), (0, 3), (130, 1001), (1,), (65, 45)]
    threads = fg.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            fg.set_num_threads(n)
            results.append(run(OPTIMIZERS[name], "cpu", fg.float32, foreach=True, steps=2, shapes=shapes)[0])
        fg.set_num_threads(2)
        single = run(OPTIMIZERS[name], "cpu", fg.float32, foreach=False, steps=2, shapes=shapes)[0]
    finally:
        fg.set_num_threads(threads)
    for one, two, s in zip(*results, single):
        np.testing.assert_array_equal(one, s)
        np.testing.assert_array_equal(two, s)


@pytest.mark.parametrize("foreach, expected", [(True, "adam_update_multi("), (False, "adam_update(")])
def test_the_step_runs_the_op_its_mode_names(foreach, expected):
    shapes = [(3, 2), (2,)] * 20  # one multi-tensor op for all 40 parameters
    params = make_params("cpu", fg.float32, seed=1, shapes=shapes)
    for p in params:
        p.grad = fg.ones(*p.shape)
    opt = fg.optim.Adam(params, foreach=foreach)
    state, _ = opt.plan_state()
    tracer = fg._core.plan.Tracer()
    with tracer:
        opt._update(0, opt.foreach)
    text = str(fg._core.plan.Plan(tracer, [], [], [], [], params + state))
    assert expected in text and text.count("adam_update") == (1 if foreach else len(shapes))


def test_mixed_dtypes_fall_back_to_per_parameter_updates(device):
    a = make_params(device, fg.float32, seed=2, shapes=[(4, 3), (5,)])
    b = make_params(device, fg.float64, seed=2, shapes=[(6,)])
    results = []
    for foreach in (True, False):
        params = [p.detach().clone().requires_grad_(True) for p in a + b]
        opt = fg.optim.SGD(params, lr=0.5, momentum=0.5, foreach=foreach)
        for step in range(2):
            for i, p in enumerate(params):
                p.grad = fg.full(p.shape, 0.25 * (i + 1 + step), dtype=p.dtype, device=p.device)
            opt.step()
        results.append([p.detach().cpu().numpy() for p in params])
    for x, y in zip(*results):
        np.testing.assert_array_equal(x, y)
