"""The batch_norm op (training BatchNorm on the CPU, float32/float64) and its first-order gradient
op batch_norm_backward: against NumPy at odd shapes ((N, C), (N, C, L), (N, C, H, W), one value
per plane, a large mean), non-contiguous inputs, float64 finite differences (first order through
batch_norm_backward, second order through the composed rule), compiled == eager, every ISA level."""
from pathlib import Path

import numpy as np
import pytest

import flowgrad as fg
from flowgrad import nn
from conftest import ISA_LEVELS, check_parameter_grads, make, non_contiguous, run_at_isa

F = fg.nn.functional


def np_batch_norm(x, weight, bias, eps=1e-5):
    dims = tuple(d for d in range(x.ndim) if d != 1)
    shape = [1] * x.ndim
    shape[1] = -1
    mean, var = x.mean(axis=dims, keepdims=True), x.var(axis=dims, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight.reshape(shape) + bias.reshape(shape)


SHAPES = [(7, 3), (5, 3, 9), (4, 3, 5, 7), (1, 2, 3, 1), (2, 5, 1, 1), (3, 1, 33, 17)]


def module_for(shape, affine=True, dtype=fg.float32):
    cls = nn.BatchNorm1d if len(shape) < 4 else nn.BatchNorm2d
    return cls(shape[1], affine=affine).to(dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_op_matches_numpy(rng, shape, dtype):
    x = make(rng, shape) * 3 + 1
    bn = module_for(shape, dtype=fg.float32 if dtype == np.float32 else fg.float64)
    w, b = rng.uniform(0.5, 1.5, shape[1]), rng.uniform(-1, 1, shape[1])
    with fg.no_grad():
        bn.weight.copy_(fg.tensor(w.astype(dtype)))
        bn.bias.copy_(fg.tensor(b.astype(dtype)))
    y = bn(fg.tensor(x.astype(dtype)))
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    fg.testing.assert_close(y, np_batch_norm(x, w, b), **tol)
    dims = tuple(d for d in range(x.ndim) if d != 1)
    count = x.size // shape[1]
    fg.testing.assert_close(bn.running_mean, 0.1 * x.mean(dims), rtol=1e-5, atol=1e-6)
    fg.testing.assert_close(bn.running_var, 0.9 + 0.1 * x.var(dims) * count / (count - 1), rtol=1e-5, atol=1e-6)


def test_batch_norm_op_statistics_of_a_large_mean(rng):
    # two passes (the mean, then the squares about it): no cancellation in float32 (a one-pass
    # E[x^2] - E[x]^2 of these values keeps no digit of the variance)
    x = (1000 + make(rng, (8, 2, 16, 16)) * 0.1).astype(np.float32)
    y = nn.BatchNorm2d(2, affine=False)(fg.tensor(x))
    fg.testing.assert_close(y, np_batch_norm(x.astype(np.float64), np.ones(2), np.zeros(2)), rtol=2e-3, atol=2e-3)


def test_batch_norm_op_takes_non_contiguous_input(rng):
    x = make(rng, (3, 4, 5, 6))
    bn = nn.BatchNorm2d(4, affine=False).to(fg.float64)
    xt = non_contiguous(x)
    assert not xt.is_contiguous()
    fg.testing.assert_close(bn(xt), np_batch_norm(x, np.ones(4), np.zeros(4)), rtol=1e-10, atol=1e-10)
    half = nn.BatchNorm2d(2, affine=False).to(fg.float64)  # every other channel: planes a stride apart
    fg.testing.assert_close(half(fg.tensor(x)[:, ::2]), np_batch_norm(x[:, ::2], np.ones(2), np.zeros(2)),
                            rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(7, 3), (2, 3, 5), (3, 2, 5, 3), (2, 1, 1, 2)], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_op_gradients_by_finite_differences(rng, shape, affine):
    bn = module_for(shape, affine, fg.float64)
    if affine:
        with fg.no_grad():
            bn.weight.copy_(fg.tensor(rng.uniform(0.5, 1.5, shape[1])))
            bn.bias.copy_(fg.tensor(rng.uniform(-1, 1, shape[1])))
    x = fg.tensor(make(rng, shape), requires_grad=True)
    # a non-uniform upstream gradient, so that every term of the rule matters
    proj = fg.tensor(make(rng, shape))
    assert fg.testing.gradcheck(lambda v: bn(v) * proj, [x])
    if affine:
        check_parameter_grads(lambda: (bn(x.detach()) * proj).sum(), [bn.weight, bn.bias])


def test_batch_norm_second_order_through_the_composed_rule(rng):
    bn = nn.BatchNorm2d(2).to(fg.float64)
    with fg.no_grad():
        bn.weight.copy_(fg.tensor([0.7, 1.3]))
    proj = fg.tensor(make(rng, (3, 2, 2, 3)))

    def penalty(x):
        x = x if x.requires_grad else x.detach().requires_grad_()
        with fg.enable_grad():
            (gx,) = fg.autograd.grad((bn(x) * proj).pow(3).sum(), [x], create_graph=True)
        return (gx ** 2).sum()
    x = fg.tensor(make(rng, (3, 2, 2, 3)), requires_grad=True)
    assert fg.testing.gradcheck(penalty, [x])


def test_batch_norm_runs_as_one_op_and_compiles_to_the_eager_bits(rng):
    fg.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 9, 3))
    twin = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 9, 3))
    twin.load_state_dict(model.state_dict())
    x, y = fg.tensor(make(rng, (6, 2, 5, 5)).astype(np.float32)), fg.tensor(np.array([0, 1, 2, 0, 1, 2]))
    opt, topt = (fg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin))
    step = fg.compile(twin, F.cross_entropy, topt, example_inputs=(x, y))
    ops = [r["op"] for r in step.explain().rows]
    assert "batch_norm" in ops and "batch_norm_backward" in ops and "var" not in ops, ops
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        assert loss.item() == step(x, y).item()
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy()), name


def test_batch_norm_keeps_the_composition_under_autocast(rng):
    bn = nn.BatchNorm2d(3)
    x = fg.tensor(make(rng, (2, 3, 4, 4)).astype(np.float32))
    with fg.autocast("cpu"):
        y = bn(x)
    fg.testing.assert_close(y.float(), np_batch_norm(x.numpy().astype(np.float64), np.ones(3), np.zeros(3)),
                            rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_batch_norm_op_at_each_isa_level(level):
    run_at_isa(level, """
        import sys
        sys.path[:0] = [{tests!r}, {here!r}]
        import test_batch_norm as mod
        rng = np.random.default_rng(0)
        for shape in mod.SHAPES:
            x = mod.make(rng, shape) * 3 + 1
            bn = mod.module_for(shape)
            y = bn(fg.tensor(x.astype(np.float32)))
            fg.testing.assert_close(y, mod.np_batch_norm(x, np.ones(shape[1]), np.zeros(shape[1])), rtol=1e-5, atol=1e-5)
            b64 = mod.module_for(shape, dtype=fg.float64)
            v = fg.tensor(x, requires_grad=True)
            proj = fg.tensor(mod.make(rng, shape))
            assert fg.testing.gradcheck(lambda u: b64(u) * proj, [v])
        print("ok")
    """.format(tests=str(Path(__file__).parent.parent), here=str(Path(__file__).parent)))
