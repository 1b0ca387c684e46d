"""Loss functions and modules with PyTorch's signatures: class weights, ignore_index,
label_smoothing, pos_weight, reductions and the legacy size_average/reduce flags, against NumPy
formulas (and PyTorch where installed), float64 gradchecks, and the documented errors."""
import numpy as np
import pytest
try:  # the reference implementation; CI installs no PyTorch, so those comparisons skip there
    import torch
except ImportError:
    torch = None

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn

from conftest import gradcheck

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: the comparison with torch is skipped")


def f64(a):
    return fg.tensor(np.asarray(a, dtype=np.float64), dtype=fg.float64)


def log_softmax(x, axis):
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


def np_weighted_ce(x, t, w, ignore=-100, eps=0.0, reduction="mean"):
    """PyTorch's weighted cross entropy of logits (N, C) at class indices, written out."""
    logp = log_softmax(x, 1)
    c = x.shape[1]
    keep = t != ignore
    safe = np.where(keep, t, 0)
    wt = w[safe] * keep
    nll = -logp[np.arange(len(t)), safe] * wt
    smooth = -(logp * w).sum(1) * keep
    loss = (1 - eps) * nll + eps / c * smooth
    return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / wt.sum()}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_weighted_cross_entropy_matches_the_formula(rng, reduction, eps):
    x = rng.standard_normal((7, 4))
    t = np.array([0, 3, -100, 1, 2, 3, 0])
    w = np.array([0.5, 2.0, 1.0, 3.0])
    got = F.cross_entropy(f64(x), fg.tensor(t), f64(w), reduction=reduction, label_smoothing=eps)
    np.testing.assert_allclose(got.numpy(), np_weighted_ce(x, t, w, eps=eps, reduction=reduction), rtol=1e-12)
    module = nn.CrossEntropyLoss(weight=f64(w), reduction=reduction, label_smoothing=eps)
    np.testing.assert_allclose(module(f64(x), fg.tensor(t)).numpy(), got.numpy(), rtol=1e-12)
    gradcheck(lambda a, b: F.cross_entropy(a, fg.tensor(t), b, label_smoothing=eps), x, w)


def test_weighted_cross_entropy_spatial_and_probabilities(rng):
    x = rng.standard_normal((2, 3, 4, 5))
    t = rng.integers(0, 3, size=(2, 4, 5))
    w = np.array([1.0, 0.25, 4.0])
    flat = np.moveaxis(x, 1, -1).reshape(-1, 3)
    np.testing.assert_allclose(F.cross_entropy(f64(x), fg.tensor(t), f64(w)).numpy(),
                               np_weighted_ce(flat, t.reshape(-1), w), rtol=1e-12)
    p = np.exp(log_softmax(rng.standard_normal((6, 3)), 1))
    logits = rng.standard_normal((6, 3))
    expected = -(log_softmax(logits, 1) * w * (p * 0.9 + 0.1 / 3)).sum(1).mean()
    np.testing.assert_allclose(F.cross_entropy(f64(logits), f64(p), f64(w), label_smoothing=0.1).numpy(), expected,
                               rtol=1e-12)


def test_weighted_nll_loss_divides_by_the_weights_taken(rng):
    logp = log_softmax(rng.standard_normal((5, 3)), 1)
    t = np.array([2, 0, 1, 1, -1])
    w = np.array([1.0, 3.0, 0.5])
    taken = w[t[:4]]
    picked = logp[np.arange(4), t[:4]]
    np.testing.assert_allclose(F.nll_loss(f64(logp), fg.tensor(t), f64(w), ignore_index=-1).numpy(),
                               -(picked * taken).sum() / taken.sum(), rtol=1e-12)
    none = nn.NLLLoss(f64(w), ignore_index=-1, reduction="none")(f64(logp), fg.tensor(t)).numpy()
    np.testing.assert_allclose(none, np.append(-picked * taken, 0.0), rtol=1e-12)
    np.testing.assert_allclose(nn.NLLLoss()(f64(logp), fg.tensor(np.abs(t))).numpy(),
                               -logp[np.arange(5), np.abs(t)].mean(), rtol=1e-12)
    gradcheck(lambda a: F.nll_loss(a, fg.tensor(t), f64(w), ignore_index=-1), logp)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_clamps_its_logs(reduction, rng):
    p = np.array([0.0, 1e-50, 0.3, 0.9, 1.0, 0.5])
    t = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.25])
    w = rng.uniform(0.5, 2.0, size=6)
    with np.errstate(divide="ignore"):
        expected = -w * (t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log(1 - p), -100))
    expected = {"none": expected, "sum": expected.sum(), "mean": expected.mean()}[reduction]
    got = F.binary_cross_entropy(f64(p), f64(t), f64(w), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(nn.BCELoss(f64(w), reduction=reduction)(f64(p), f64(t)).numpy(), expected, rtol=1e-12)
    x = fg.tensor(p, dtype=fg.float64, requires_grad=True)
    F.binary_cross_entropy(x, f64(t)).backward()
    assert np.isfinite(x.grad.numpy()).all()
    gradcheck(lambda a: F.binary_cross_entropy(a, f64(t[2:4])), p[2:4])


def test_bce_with_logits_pos_weight_and_weight(rng):
    x = rng.standard_normal((4, 3)) * 30
    t = (rng.random((4, 3)) > 0.5).astype(np.float64)
    pw, w = np.array([1.0, 2.0, 0.5]), rng.uniform(0.5, 2.0, size=(4, 1))
    softplus = lambda v: np.log1p(np.exp(-np.abs(v))) + np.maximum(v, 0)  # noqa: E731
    expected = w * ((1 - t) * softplus(x) + pw * t * softplus(-x))
    got = F.binary_cross_entropy_with_logits(f64(x), f64(t), f64(w), pos_weight=f64(pw), reduction="none")
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    module = nn.BCEWithLogitsLoss(pos_weight=f64(pw))
    np.testing.assert_allclose(module(f64(x), f64(t)).numpy(), ((1 - t) * softplus(x) + pw * t * softplus(-x)).mean(),
                               rtol=1e-12)
    assert "pos_weight" in module.state_dict()
    gradcheck(lambda a, b: F.binary_cross_entropy_with_logits(a, f64(t), pos_weight=b), x / 30, pw)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
def test_smooth_l1_and_huber_modules(beta, rng):
    x, y = rng.standard_normal((5, 4)) * 2, rng.standard_normal((5, 4))
    d = np.abs(x - y)
    expected = d if beta == 0 else np.where(d < beta, 0.5 * d ** 2 / max(beta, 1e-300), d - 0.5 * beta)
    np.testing.assert_allclose(F.smooth_l1_loss(f64(x), f64(y), beta=beta, reduction="none").numpy(), expected,
                               rtol=1e-12)
    np.testing.assert_allclose(nn.SmoothL1Loss(beta=beta)(f64(x), f64(y)).numpy(), expected.mean(), rtol=1e-12)
    if beta:
        huber = np.where(d < beta, 0.5 * d ** 2, beta * (d - 0.5 * beta))
        np.testing.assert_allclose(nn.HuberLoss(reduction="sum", delta=beta)(f64(x), f64(y)).numpy(), huber.sum(),
                                   rtol=1e-12)
        gradcheck(lambda a: F.smooth_l1_loss(a, f64(y), beta=beta), x)


def test_regression_modules_and_legacy_flags(rng):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(nn.MSELoss()(f64(x), f64(y)).numpy(), ((x - y) ** 2).mean(), rtol=1e-12)
    np.testing.assert_allclose(nn.L1Loss(reduction="sum")(f64(x), f64(y)).numpy(), np.abs(x - y).sum(), rtol=1e-12)
    assert nn.MSELoss(size_average=False).reduction == "sum"
    assert nn.MSELoss(reduce=False).reduction == "none"
    assert nn.L1Loss(size_average=True, reduce=True).reduction == "mean"
    np.testing.assert_allclose(F.mse_loss(f64(x), f64(y), size_average=False).numpy(), ((x - y) ** 2).sum(),
                               rtol=1e-12)
    assert "reduction='sum'" in repr(nn.L1Loss(reduction="sum"))


def test_kl_div_loss_module(rng):
    logq = log_softmax(rng.standard_normal((4, 5)), 1)
    p = np.exp(log_softmax(rng.standard_normal((4, 5)), 1))
    expected = (p * (np.log(p) - logq)).sum() / 4
    np.testing.assert_allclose(nn.KLDivLoss(reduction="batchmean")(f64(logq), f64(p)).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(nn.KLDivLoss(reduction="sum", log_target=True)(f64(logq), f64(np.log(p))).numpy(),
                               expected * 4, rtol=1e-12)


def test_loss_weights_are_buffers_that_move_and_save():
    m = nn.CrossEntropyLoss(weight=fg.tensor([1.0, 2.0]))
    assert list(m.state_dict()) == ["weight"]
    assert nn.CrossEntropyLoss().state_dict() == {}
    m.double()
    assert m.weight.dtype == fg.float64


def test_loss_errors(rng):
    x = f64(rng.standard_normal((4, 3)))
    with pytest.raises(fg.ShapeError, match=r"cross_entropy: weight must have one entry per class, \(3,\), got \(2,\)"):
        F.cross_entropy(x, fg.tensor([0, 1, 2, 0]), f64([1.0, 2.0]))
    with pytest.raises(fg.ShapeError, match=r"nll_loss: target \(3,\) .* does not match input \(4, 3\)"):
        F.nll_loss(x, fg.tensor([0, 1, 2]), f64([1.0, 1.0, 1.0]))
    with pytest.raises(fg.ShapeError, match=r"binary_cross_entropy: target \(4,\) must have input's shape \(4, 3\)"):
        F.binary_cross_entropy(x.sigmoid(), f64(np.zeros(4)))
    with pytest.raises(fg.InvalidArgumentError, match="MSELoss: reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(fg.InvalidArgumentError, match="smooth_l1_loss: beta must be >= 0, got -1"):
        F.smooth_l1_loss(x, x, beta=-1)
    with pytest.raises(fg.InvalidArgumentError, match=r"cross_entropy: label_smoothing must be in \[0, 1\], got 2"):
        F.cross_entropy(x, fg.tensor([0, 1, 2, 0]), f64([1.0, 1.0, 1.0]), label_smoothing=2)


@needs_torch
def test_losses_match_torch(rng):
    x = rng.standard_normal((6, 4))
    t = np.array([0, 3, 1, -100, 2, 3])
    w = rng.uniform(0.5, 2.0, size=4)
    p = 1 / (1 + np.exp(-x))
    b = (rng.random((6, 4)) > 0.5).astype(np.float64)
    T = torch.from_numpy
    cases = [
        (nn.CrossEntropyLoss(f64(w), label_smoothing=0.1), torch.nn.CrossEntropyLoss(T(w), label_smoothing=0.1),
         (x, t)),
        (nn.NLLLoss(f64(w)), torch.nn.NLLLoss(T(w)), (log_softmax(x, 1), t)),
        (nn.BCELoss(f64(w)), torch.nn.BCELoss(T(w)), (p, b)),
        (nn.BCEWithLogitsLoss(pos_weight=f64(w)), torch.nn.BCEWithLogitsLoss(pos_weight=T(w)), (x * 20, b)),
        (nn.SmoothL1Loss(beta=0.3), torch.nn.SmoothL1Loss(beta=0.3), (x, p)),
        (nn.HuberLoss(delta=0.3), torch.nn.HuberLoss(delta=0.3), (x, p)),
        (nn.KLDivLoss(reduction="batchmean"), torch.nn.KLDivLoss(reduction="batchmean"), (log_softmax(x, 1), p / 3)),
        (nn.MSELoss(reduction="sum"), torch.nn.MSELoss(reduction="sum"), (x, p)),
        (nn.L1Loss(), torch.nn.L1Loss(), (x, p)),
    ]
    for ours, theirs, (a, c) in cases:
        got = ours(f64(a), fg.tensor(c) if c.dtype.kind == "i" else f64(c)).item()
        np.testing.assert_allclose(got, theirs(T(a), T(c)).item(), rtol=1e-10, err_msg=type(ours).__name__)
