"""PyTorch's optimizer flags on every optimizer that has them (issue 38): maximize=True ascends,
the gradient negated before the update (bitwise the step of the negated gradient, per param group,
in eager and compiled steps, against closed forms and PyTorch when installed); foreach, fused and
capturable change nothing; differentiable=True and flags the torch.optim namesake lacks raise."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from conftest import assert_compiled_trains_like_eager, assert_steps_like_torch

# name -> (class, options with every term on: momentum, weight decay, ...)
OPTIMIZERS = {
    "SGD": (fg.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    "Adam": (fg.optim.Adam, dict(lr=0.05, weight_decay=0.1)),
    "AdamW": (fg.optim.AdamW, dict(lr=0.05, weight_decay=0.1)),
    "RMSprop": (fg.optim.RMSprop, dict(lr=0.02, momentum=0.5, centered=True, weight_decay=0.1)),
    "Adagrad": (fg.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.1)),
    "Adadelta": (fg.optim.Adadelta, dict(lr=0.5, weight_decay=0.1)),
    "Adamax": (fg.optim.Adamax, dict(lr=0.05, weight_decay=0.1)),
    "NAdam": (fg.optim.NAdam, dict(lr=0.05, weight_decay=0.1)),
    "RAdam": (fg.optim.RAdam, dict(lr=0.05, weight_decay=0.1)),
}
# The flags besides maximize and foreach that each torch.optim namesake takes.
OTHER_FLAGS = {"SGD": ("differentiable", "fused"), "Adam": ("capturable", "differentiable", "fused"),
               "AdamW": ("capturable", "differentiable", "fused"), "RMSprop": ("capturable", "differentiable"),
               "Adagrad": ("differentiable", "fused"), "Adadelta": ("capturable", "differentiable"),
               "Adamax": ("capturable", "differentiable"), "NAdam": ("capturable", "differentiable"),
               "RAdam": ("capturable", "differentiable")}


def run_steps(cls, options, p0, grads, **flags):
    p = fg.nn.Parameter(fg.tensor(p0))
    opt = cls([p], **options, **flags)
    for g in grads:
        p.grad = fg.tensor(g)
        opt.step()
    return p.detach().numpy()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_maximize_steps_as_the_negated_gradient_does(name, rng):
    cls, options = OPTIMIZERS[name]
    p0 = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(8)]
    ascended = run_steps(cls, options, p0, grads, maximize=True)
    np.testing.assert_array_equal(ascended, run_steps(cls, options, p0, [-g for g in grads]))
    assert not np.allclose(ascended, run_steps(cls, options, p0, grads))


def test_maximize_matches_closed_forms():
    p0, g = np.array([1.0, -2.0, 0.5]), np.array([0.3, -0.1, 2.0])
    np.testing.assert_allclose(run_steps(fg.optim.SGD, dict(lr=0.1, weight_decay=0.2), p0, [g], maximize=True),
                               p0 - 0.1 * (-g + 0.2 * p0), rtol=1e-15)
    # Adam's first step moves each weight by lr * sign(gradient) (eps aside): upwards under maximize
    np.testing.assert_allclose(run_steps(fg.optim.Adam, dict(lr=0.01, eps=0.0), p0, [g], maximize=True),
                               p0 + 0.01 * np.sign(g), rtol=1e-14)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_maximize_climbs_a_concave_objective(name):
    cls, options = OPTIMIZERS[name]
    peak = fg.tensor([0.5, -1.0, 2.0], dtype=fg.float64)
    p = fg.nn.Parameter(fg.zeros(3, dtype=fg.float64))
    opt = cls([p], **{**options, "weight_decay": 0.0}, maximize=True)
    values = []
    for _ in range(100):
        opt.zero_grad()
        value = -((p - peak) ** 2).sum()
        value.backward()
        opt.step()
        values.append(value.item())
    assert values[-1] > values[0] + 0.5, values  # from -5.25 up towards the peak (0)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_maximize_matches_pytorch(name, rng):
    pytest.importorskip("torch")
    cls, options = OPTIMIZERS[name]
    assert_steps_like_torch(cls, {**options, "maximize": True}, rng, steps=6)


def test_maximize_is_a_param_group_option(rng):
    p0 = rng.standard_normal(3)
    grads = [rng.standard_normal(3) for _ in range(3)]
    a, b = fg.nn.Parameter(fg.tensor(p0)), fg.nn.Parameter(fg.tensor(p0))
    opt = fg.optim.Adam([{"params": [a]}, {"params": [b], "maximize": True}], lr=0.1)
    assert [g["maximize"] for g in opt.param_groups] == [False, True]
    for g in grads:
        a.grad, b.grad = fg.tensor(g), fg.tensor(g)
        opt.step()
    np.testing.assert_array_equal(a.detach().numpy(), run_steps(fg.optim.Adam, dict(lr=0.1), p0, grads))
    np.testing.assert_array_equal(b.detach().numpy(), run_steps(fg.optim.Adam, dict(lr=0.1), p0, grads,
                                                                maximize=True))
    assert opt.state_dict()["param_groups"][1]["maximize"] is True


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_steps_record_maximize_and_its_change(name, rng):
    cls, options = OPTIMIZERS[name]
    x = fg.tensor(rng.standard_normal((8, 4)).astype(np.float32))
    y = fg.tensor(rng.standard_normal((8, 2)).astype(np.float32))

    def build():
        fg.manual_seed(0)
        model = fg.nn.Sequential(fg.nn.Linear(4, 6), fg.nn.Tanh(), fg.nn.Linear(6, 2))
        return model, cls(model.parameters(), **{**options, "lr": options["lr"] * 0.1}, maximize=True)

    def descend_later(i, optimizers):  # a changed flag reaches (or re-traces) the compiled step
        if i == 2:
            for o in optimizers:
                o.param_groups[0]["maximize"] = False

    assert_compiled_trains_like_eager(build, F.mse_loss, [(x, y)] * 4, descend_later)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_foreach_fused_capturable_change_nothing(name, rng):
    cls, options = OPTIMIZERS[name]
    p0 = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(4)]
    plain = run_steps(cls, options, p0, grads)
    for flags in [dict(foreach=False), dict(foreach=True)] + [{flag: True} for flag in OTHER_FLAGS[name]
                                                              if flag != "differentiable"]:
        np.testing.assert_array_equal(run_steps(cls, options, p0, grads, **flags), plain, err_msg=str(flags))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_flags_that_cannot_be_honoured_raise(name):
    cls, options = OPTIMIZERS[name]
    p = fg.nn.Parameter(fg.ones(2))
    with pytest.raises(fg.InvalidArgumentError, match=rf"{name}: differentiable=True is not supported: flowgrad's "
                                                      r"optimizer steps run under no_grad"):
        cls([p], **options, differentiable=True)
    cls([p], **options, differentiable=False)
    lacking = sorted({"capturable", "fused"} - set(OTHER_FLAGS[name]))
    for flag in lacking:  # as PyTorch's constructor, which has no such argument
        with pytest.raises(TypeError, match=rf"{name}.__init__\(\) got an unexpected keyword argument '{flag}'"):
            cls([p], **options, **{flag: True})
    with pytest.raises(TypeError, match=rf"{name}.__init__\(\) got an unexpected keyword argument 'amsgrad_typo'"):
        cls([p], **options, amsgrad_typo=True)
    if "fused" in OTHER_FLAGS[name]:
        with pytest.raises(fg.InvalidArgumentError, match=rf"{name}: fused and foreach cannot both be True"):
            cls([p], **options, fused=True, foreach=True)


def test_lbfgs_takes_maximize_only():
    p = fg.nn.Parameter(fg.ones(2))
    assert fg.optim.LBFGS([p], maximize=True).param_groups[0]["maximize"] is True
    with pytest.raises(TypeError, match="unexpected keyword argument 'foreach'"):
        fg.optim.LBFGS([p], foreach=True)
