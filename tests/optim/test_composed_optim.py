"""RMSprop, Adagrad, Adadelta, Adamax, NAdam and RAdam (updates composed from in-place ops): float64 against NumPy references
written here, float32 against PyTorch (when installed), compiled steps equal to eager ones and
seeing scheduler changes, exact resume from state_dict, strided parameters, and errors."""
import numpy as np
import pytest

import flowgrad as fg
import flowgrad.nn.functional as F
from conftest import assert_compiled_trains_like_eager, assert_steps_like_torch


def np_rmsprop(steps, p, lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    sq, buf, gavg = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in steps:
        g = g + weight_decay * p if weight_decay else g
        sq = alpha * sq + (1 - alpha) * g * g
        if centered:
            gavg = alpha * gavg + (1 - alpha) * g
            avg = np.sqrt(sq - gavg * gavg) + eps
        else:
            avg = np.sqrt(sq) + eps
        if momentum:
            buf = momentum * buf + g / avg
            p = p - lr * buf
        else:
            p = p - lr * g / avg
    return p


def np_adagrad(steps, p, lr=0.01, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    total = np.full_like(p, initial_accumulator_value)
    for k, g in enumerate(steps, 1):
        g = g + weight_decay * p if weight_decay else g
        total = total + g * g
        p = p - lr / (1 + (k - 1) * lr_decay) * g / (np.sqrt(total) + eps)
    return p


def np_adadelta(steps, p, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    sq, acc = np.zeros_like(p), np.zeros_like(p)
    for g in steps:
        g = g + weight_decay * p if weight_decay else g
        sq = rho * sq + (1 - rho) * g * g
        delta = np.sqrt(acc + eps) / np.sqrt(sq + eps) * g
        acc = rho * acc + (1 - rho) * delta * delta
        p = p - lr * delta
    return p


def np_adamax(steps, p, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    m, u = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(steps, 1):
        g = g + weight_decay * p if weight_decay else g
        m = betas[0] * m + (1 - betas[0]) * g
        u = np.maximum(betas[1] * u, np.abs(g) + eps)
        p = p - lr / (1 - betas[0] ** t) * m / u
    return p


def _decayed(p, g, lr, weight_decay, decoupled):
    if not weight_decay:
        return p, g
    return (p * (1 - lr * weight_decay), g) if decoupled else (p, g + weight_decay * p)


def np_nadam(steps, p, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
             decoupled_weight_decay=False):
    m, v, mu_product = np.zeros_like(p), np.zeros_like(p), 1.0
    for t, g in enumerate(steps, 1):
        p, g = _decayed(p, g, lr, weight_decay, decoupled_weight_decay)
        mu = betas[0] * (1 - 0.5 * 0.96 ** (t * momentum_decay))
        mu_next = betas[0] * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
        mu_product *= mu
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        denom = np.sqrt(v / (1 - betas[1] ** t)) + eps
        p = p - lr * (1 - mu) / (1 - mu_product) * g / denom - lr * mu_next / (1 - mu_product * mu_next) * m / denom
    return p


def np_radam(steps, p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled_weight_decay=False):
    m, v = np.zeros_like(p), np.zeros_like(p)
    rho_inf = 2 / (1 - betas[1]) - 1
    for t, g in enumerate(steps, 1):
        p, g = _decayed(p, g, lr, weight_decay, decoupled_weight_decay)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat = m / (1 - betas[0] ** t)
        rho_t = rho_inf - 2 * t * betas[1] ** t / (1 - betas[1] ** t)
        if rho_t > 5:
            rect = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            p = p - lr * m_hat * rect * np.sqrt(1 - betas[1] ** t) / (np.sqrt(v) + eps)
        else:
            p = p - lr * m_hat
    return p


CASES = {
    "rmsprop": (fg.optim.RMSprop, np_rmsprop, {}),
    "rmsprop_all": (fg.optim.RMSprop, np_rmsprop, dict(lr=0.02, alpha=0.9, momentum=0.8, centered=True,
                                                        weight_decay=0.1)),
    "rmsprop_momentum": (fg.optim.RMSprop, np_rmsprop, dict(momentum=0.5, eps=1e-3)),
    "adagrad": (fg.optim.Adagrad, np_adagrad, {}),
    "adagrad_all": (fg.optim.Adagrad, np_adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.01,
                                                        initial_accumulator_value=0.2, eps=1e-6)),
    "adadelta": (fg.optim.Adadelta, np_adadelta, {}),
    "adadelta_all": (fg.optim.Adadelta, np_adadelta, dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)),
    "adamax": (fg.optim.Adamax, np_adamax, {}),
    "adamax_all": (fg.optim.Adamax, np_adamax, dict(lr=0.05, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.1)),
    "nadam": (fg.optim.NAdam, np_nadam, {}),
    "nadam_all": (fg.optim.NAdam, np_nadam, dict(lr=0.05, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.1,
                                                  momentum_decay=0.01)),
    "nadam_decoupled": (fg.optim.NAdam, np_nadam, dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
    "radam": (fg.optim.RAdam, np_radam, {}),
    "radam_all": (fg.optim.RAdam, np_radam, dict(lr=0.05, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1)),
    "radam_decoupled": (fg.optim.RAdam, np_radam, dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1,
                                                        decoupled_weight_decay=True)),
}
COMPILED = ["rmsprop_all", "adagrad_all", "adadelta_all", "adamax_all", "nadam_all", "nadam_decoupled", "radam_all",
            "radam_decoupled"]


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_numpy_reference_in_float64(name, device, rng):
    cls, reference, options = CASES[name]
    p0 = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(10)]  # RAdam rectifies from step 6 on
    p = fg.nn.Parameter(fg.tensor(p0, device=device))
    opt = cls([p], **options)
    for g in grads:
        p.grad = fg.tensor(g, device=device)
        opt.step()
    np.testing.assert_allclose(p.detach().cpu().numpy(), reference(grads, p0, **options), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_pytorch_in_float32(name, rng):
    pytest.importorskip("torch")
    cls, _, options = CASES[name]
    assert_steps_like_torch(cls, options, rng)


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_steps_equal_eager_ones_and_see_a_changed_lr(name, rng):
    cls, _, options = CASES[name]
    x = fg.tensor(rng.standard_normal((8, 4)).astype(np.float32))
    y = fg.tensor(rng.standard_normal((8, 2)).astype(np.float32))

    def build():
        fg.manual_seed(0)
        model = fg.nn.Sequential(fg.nn.Linear(4, 6), fg.nn.Tanh(), fg.nn.Linear(6, 2))
        return model, cls(model.parameters(), **options)

    def lower_lr(i, optimizers):  # a scheduler's change reaches the compiled step through the hyper tensor
        if i == 2:
            for o in optimizers:
                o.param_groups[0]["lr"] *= 0.1

    assert_compiled_trains_like_eager(build, F.mse_loss, [(x, y)] * 4, lower_lr)


@pytest.mark.parametrize("name", COMPILED)
def test_state_dict_resumes_exactly(name, rng):
    cls, _, options = CASES[name]
    grads = [rng.standard_normal(3) for _ in range(6)]

    def run(steps, opt_state=None, start=None):
        p = fg.nn.Parameter(fg.tensor(start if start is not None else np.ones(3)))
        opt = cls([p], **options)
        if opt_state is not None:
            opt.load_state_dict(opt_state)
        for g in steps:
            p.grad = fg.tensor(g)
            opt.step()
        return p, opt

    whole, _ = run(grads)
    half, opt = run(grads[:3])
    resumed, _ = run(grads[3:], opt.state_dict(), half.detach().numpy())
    np.testing.assert_array_equal(resumed.detach().numpy(), whole.detach().numpy())


def test_strided_parameters_are_updated_in_place(rng):
    base = rng.standard_normal((3, 4))
    strided = fg.nn.Parameter(fg.tensor(base).t())
    plain = fg.nn.Parameter(fg.tensor(base.T.copy()))
    pointer = strided.data_ptr()
    for p in (strided, plain):
        opt = fg.optim.RMSprop([p], lr=0.1, momentum=0.5)
        for _ in range(2):
            p.grad = fg.ones(4, 3, dtype=fg.float64)
            opt.step()
    assert not strided.is_contiguous() and strided.data_ptr() == pointer
    np.testing.assert_array_equal(strided.detach().numpy(), plain.detach().numpy())


def test_errors_name_the_optimizer_and_the_options():
    p = fg.nn.Parameter(fg.ones(2))
    with pytest.raises(fg.InvalidArgumentError, match=r"RMSprop: need 0 <= alpha <= 1 and eps, momentum, "
                                                      r"weight_decay >= 0, got alpha=1.5"):
        fg.optim.RMSprop([p], alpha=1.5)
    with pytest.raises(fg.InvalidArgumentError, match=r"RMSprop: lr must be >= 0, got -1"):
        fg.optim.RMSprop([p], lr=-1)
    with pytest.raises(fg.InvalidArgumentError, match=r"Adagrad: lr_decay, weight_decay, initial_accumulator_value "
                                                      r"and eps must be >= 0, got -0.1"):
        fg.optim.Adagrad([p], lr_decay=-0.1)
    with pytest.raises(fg.InvalidArgumentError, match=r"Adadelta: need 0 <= rho <= 1 and eps, weight_decay >= 0, "
                                                      r"got rho=2"):
        fg.optim.Adadelta([p], rho=2)
    with pytest.raises(fg.InvalidArgumentError, match=r"Adamax: betas must be in \[0, 1\) and eps, weight_decay >= 0, "
                                                      r"got betas=\(1.0, 0.999\)"):
        fg.optim.Adamax([p], betas=(1.0, 0.999))
    with pytest.raises(fg.InvalidArgumentError, match=r"RAdam: betas must be in \[0, 1\) and eps, weight_decay >= 0, "
                                                      r"got betas=\(0.9, 0.999\), eps=1e-08, weight_decay=-1"):
        fg.optim.RAdam([p], weight_decay=-1)
    with pytest.raises(fg.InvalidArgumentError, match=r"NAdam: momentum_decay must be >= 0, got -0.1"):
        fg.optim.NAdam([p], momentum_decay=-0.1)


def test_radam_is_momentum_sgd_until_the_variance_is_tractable():
    """rho_t <= 5 in RAdam's first steps (beta2 = 0.999: the first five): the update is lr times the
    bias-corrected exp_avg, whatever exp_avg_sq is; from the sixth step the adaptive rate applies."""
    p = fg.nn.Parameter(fg.zeros(1, dtype=fg.float64))
    opt = fg.optim.RAdam([p], lr=1.0)
    moves = []
    for _ in range(6):
        before = p.detach().numpy().copy()
        p.grad = fg.tensor(np.array([2.0]))
        opt.step()
        moves.append(float(before[0] - p.detach().numpy()[0]))
    np.testing.assert_allclose(moves[:5], [2.0] * 5, rtol=1e-12)  # a constant gradient: m_hat = 2
    assert abs(moves[5] - 2.0) > 0.1  # rectified: about sqrt(v_hat)-normalised
