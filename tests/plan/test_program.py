"""The plan pipeline seen from Python: pass counts printed at FLOWGRAD_DEBUG=1, and plans that
share one arena (the passes themselves are checked Program -> Program in tests/cpp/test_passes.cpp)."""
import ast
import os
import subprocess
import sys

import numpy as np
import pytest
from test_compile import OPTIMIZERS, build, data, tensors

import flowgrad as fg
import flowgrad.nn.functional as F


DEBUG_SCRIPT = """
import flowgrad as fg
model = fg.nn.Sequential(fg.nn.Linear(6, 8), fg.nn.ReLU(), fg.nn.Linear(8, 2))
step = fg.compile(model, fg.nn.functional.mse_loss, fg.optim.SGD(model.parameters(), lr=0.1),
                  example_inputs=(fg.randn(4, 6), fg.randn(4, 2)))
print(repr(step.plan.passes()))
"""


def test_debug_level_one_prints_each_pass_count():
    # FLOWGRAD_DEBUG is read once per process, so the compile runs in a fresh one.
    env = dict(os.environ, FLOWGRAD_DEBUG="1")
    done = subprocess.run([sys.executable, "-c", DEBUG_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    passes = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert [p[0] for p in passes[1:]] == ["cse", "constant folding", "gradient binding", "dead code",
                                          "transpose folding", "fuse epilogues", "fuse add norm", "pair gemms", "fusion"]
    for name, before, after in passes[1:-1]:
        assert f"flowgrad: pass {name}: {before} -> {after} instructions" in done.stderr
    assert "flowgrad: pass guard updates:" in done.stderr  # run, though not one of the reported counts


def test_plans_sharing_one_arena_train_like_plans_with_their_own(device):
    xs, ys = tensors(*data("mlp", np.random.default_rng(2), 4), device)
    short = [x[:3].contiguous() for x in xs], [y[:3].contiguous() for y in ys]
    losses = []
    for shared in (False, True):
        model, opt, _ = build("mlp", OPTIMIZERS["adam"], device)
        full = fg.compile(model, F.cross_entropy, opt, example_inputs=(xs[0], ys[0]))
        part = fg.compile(model, F.cross_entropy, opt, example_inputs=(short[0][0], short[1][0]))
        if shared:
            full.plan.share_arena(part.plan)
            assert full.plan.arena_shared_with(part.plan)
            full.plan.check_memory()
        else:
            assert not full.plan.arena_shared_with(part.plan)
        run = []
        for k in range(4):  # alternate: each overwrites the other's intermediates
            run.append(full(xs[k], ys[k]).item())
            run.append(part(short[0][k], short[1][k]).item())
        losses.append(run)
    np.testing.assert_array_equal(losses[0], losses[1])


def test_sharing_an_arena_across_devices_raises(device):
    if device == "cpu":
        pytest.skip("needs a second device kind: a CUDA plan against a CPU one")
    x, y = fg.randn(4, 5), fg.randn(4, 3)
    on_cpu = fg.compile(fg.nn.Linear(5, 3), F.mse_loss, None, example_inputs=(x, y))
    on_device = fg.compile(fg.nn.Linear(5, 3).to(device), F.mse_loss, None,
                           example_inputs=(x.to(device), y.to(device)))
    with pytest.raises(fg.DeviceError, match="share_arena: plans on cuda:0 and cpu"):
        on_device.plan.share_arena(on_cpu.plan)


def mlp_step(seed=0):
    fg.manual_seed(seed)
    model = fg.nn.Sequential(fg.nn.Linear(6, 8), fg.nn.ReLU(), fg.nn.Linear(8, 2))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    x, y = fg.randn(4, 6), fg.randn(4, 2)
    return model, fg.compile(model, F.mse_loss, opt, example_inputs=(x, y)), (x, y)


def test_plan_skip_turns_optional_passes_off_and_the_step_trains_the_same(monkeypatch):
    model, full, (x, y) = mlp_step()
    counts = {name: (before, after) for name, before, after in full.plan.passes()}
    assert counts["fuse epilogues"][0] > counts["fuse epilogues"][1]  # Linear + ReLU, and its bias gradient
    monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", "fuse_epilogues, dead_code")
    other, skipping, _ = mlp_step()
    counts = {name: (before, after) for name, before, after in skipping.plan.passes()}
    assert counts["fuse epilogues"][0] == counts["fuse epilogues"][1]
    assert counts["dead code"][0] == counts["dead code"][1]
    assert skipping.stats["instructions"] > full.stats["instructions"]
    for _ in range(3):
        np.testing.assert_allclose(skipping(x, y).item(), full(x, y).item(), rtol=1e-5)
    for a, b in zip(other.parameters(), model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_plan_skip_refuses_a_required_or_unknown_pass(monkeypatch):
    for name in ("gradient_binding", "cse2"):
        monkeypatch.setenv("FLOWGRAD_PLAN_SKIP", name)
        with pytest.raises(fg.InvalidArgumentError, match=rf"FLOWGRAD_PLAN_SKIP: '{name}' is not a pass that can be "
                                                          r"skipped \(cse, constant_folding, dead_code, "
                                                          r"transpose_folding, fuse_epilogues, fuse_add_norm, "
                                                          r"pair_gemms, fusion, overlap_collectives\)"):
            mlp_step()
