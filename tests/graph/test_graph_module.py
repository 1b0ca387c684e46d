"""A Graph is a Module: registration, state_dict, train/eval, freeze, parameters_by_tag,
timeouts and level-parallel execution."""
import os
import signal
import time

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from conftest import run_isolated


def model(device="cpu"):
    fg.manual_seed(0)
    return (fg.flow(nn.Linear(4, 8)).tag("enc")
            .split(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)), nn.Linear(8, 8))
            .tag_group("head").merge(fg.flow.Mean())
            .through(nn.Linear(8, 2)).tag("out")
            .build().to(device))


def test_parameters_state_dict_and_repr():
    g = model()
    names = [n for n, _ in g.named_parameters()]
    assert names[:2] == ["1.weight", "1.bias"] and "3.0.weight" in names
    sd = g.state_dict()
    h = model()
    h.load_state_dict(sd)
    x = fg.randn(3, 4)
    g.eval(), h.eval()
    np.testing.assert_array_equal(g(x).numpy(), h(x).numpy())
    assert "Graph(" in repr(g) and "Mean()" in repr(g)
    assert isinstance(g, nn.Module)


def test_train_eval_propagate():
    g = model()
    g.eval()
    assert all(not m.training for m in g.modules())
    g.train()
    assert all(m.training for m in g.modules())


def test_parameters_by_tag_and_groups():
    g = model()
    enc = g.parameters_by_tag("enc")
    assert [tuple(p.shape) for p in enc] == [(8, 4), (8,)]
    assert len(g.parameters_by_tag("head")) == 6
    assert g.sub("enc") is not None and isinstance(g.sub("head_1"), nn.Sequential)


def test_freeze_leaves_parameters_bitwise_unchanged():
    g = model()
    opt = fg.optim.AdamW(g.parameters(), lr=0.1, weight_decay=0.1)
    g.freeze("enc", "head")
    frozen = [p.numpy().copy() for p in g.parameters_by_tag("enc") + g.parameters_by_tag("head")]
    out_before = g.parameters_by_tag("out")[0].numpy().copy()
    for _ in range(3):
        opt.zero_grad()
        g(fg.randn(5, 4)).square().mean().backward()
        g.zero_frozen_grads()
        opt.step()
    after = [p.numpy() for p in g.parameters_by_tag("enc") + g.parameters_by_tag("head")]
    for a, b in zip(frozen, after):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(out_before, g.parameters_by_tag("out")[0].numpy())
    g.unfreeze()
    assert all(p.requires_grad for p in g.parameters())


def test_zero_frozen_grads_drops_accumulated_grads():
    g = model()
    g(fg.randn(2, 4)).sum().backward()
    g.freeze("enc")
    assert g.parameters_by_tag("enc")[0].grad is not None
    g.zero_frozen_grads()
    assert all(p.grad is None for p in g.parameters_by_tag("enc"))


def test_to_device_is_module_to():
    g = model()
    assert g.to("cpu") is g


def test_timeout_between_loop_iterations():
    class Slow(nn.Module):
        def forward(self, x):
            time.sleep(0.02)
            return x

    g = fg.flow(nn.Identity()).loop(Slow()).for_(50).build()
    with pytest.raises(TimeoutError, match=r"Graph.forward: timed out after 0.05 s \(checked between loop iterations\)"):
        g(fg.zeros(2), timeout=0.05)
    assert g(fg.zeros(2), timeout=10.0).shape == (2,)
    with pytest.raises(fg.InvalidArgumentError, match="timeout must be > 0"):
        g(fg.zeros(2), timeout=0)


def test_timeout_between_levels():
    class Slow(nn.Module):
        def forward(self, x):
            time.sleep(0.03)
            return x

    g = fg.flow(Slow()).through(Slow()).through(Slow()).through(Slow()).build()
    with pytest.raises(TimeoutError, match=r"checked between levels"):
        g(fg.zeros(2), timeout=0.05)


@pytest.mark.parametrize("construct", ["loop", "map"])
def test_ctrl_c_stops_a_long_forward(construct):
    # SIGALRM's handler runs at the first signal check and sends SIGINT, whose default handler
    # raises KeyboardInterrupt at the next one: the path of a real Ctrl-C.
    if construct == "loop":
        g, x = fg.flow(nn.Identity()).loop(nn.Linear(2, 2)).for_(10**8).build(), fg.zeros(2)
    else:
        g, x = fg.flow(nn.Identity()).map(nn.Linear(2, 2)).each().build(), fg.zeros(10**6, 2)
    old = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with fg.no_grad(), pytest.raises(KeyboardInterrupt):
            g(x, timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_timeout_in_grad_mode_frees_the_partial_graph():
    # The loop builds an autograd chain as long as the timeout allows; the TimeoutError used to
    # free it recursively and crash.
    out = run_isolated("""
        g = fg.flow(fg.nn.Identity()).loop(fg.nn.Linear(1, 1)).for_(10**9).build()
        try:
            g(fg.ones(1, 1), timeout=3.0)
        except TimeoutError as e:
            print("timed out")
    """)
    assert out.strip() == "timed out"


def test_levels_group_independent_nodes():
    g = model()
    assert g.levels == [[1], [2, 3, 4], [5], [6]]


@pytest.mark.parametrize("train", [True, False])
def test_level_parallel_equals_sequential(train, device):
    # on cuda the branches run on streams of their own (one cuBLAS handle per thread)
    g = model(device)
    g.train(train)
    x = fg.randn(16, 4, device=device)
    results = []
    for parallel in (True, False):
        g.parallel = parallel
        fg.manual_seed(7)
        g.zero_grad()
        out = g(x)
        out.square().sum().backward()
        results.append((out.numpy().copy(), [p.grad.numpy().copy() for p in g.parameters()]))
    np.testing.assert_array_equal(results[0][0], results[1][0])  # dropout masks included
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_parallel_level_with_python_modules_and_errors(device):
    class Twice(nn.Module):
        def forward(self, x):
            return x * 2

    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("broken branch")

    g = fg.flow(nn.Identity()).split(Twice(), Twice(), nn.Linear(3, 3)).merge(fg.flow.Add()).build().to(device)
    assert g(fg.ones(2, 3, device=device)).shape == (2, 3)
    bad = fg.flow(nn.Identity()).split(Twice(), Broken()).merge(fg.flow.Add()).build()
    with pytest.raises(KeyError, match="broken branch"):
        bad(fg.ones(2, 3, device=device))
    # a graph nested in a parallel level runs its own levels inline
    inner = fg.flow(nn.Identity()).split(Twice(), Twice()).merge(fg.flow.Add()).build()
    outer = fg.flow(nn.Identity()).split(inner, Twice()).merge(fg.flow.Add()).build()
    np.testing.assert_array_equal(outer(fg.ones(1, 2, device=device)).numpy(), np.full((1, 2), 6.0))


def test_no_grad_reaches_parallel_branches(device):
    g = model(device)
    with fg.no_grad():
        out = g(fg.randn(2, 4, device=device))
    assert not out.requires_grad
