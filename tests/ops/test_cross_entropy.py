"""The fused cross_entropy op (and cross_entropy_backward) against the composite it replaced
(log_softmax + gather, kept as nn.functional._cross_entropy_composite) and against NumPy."""
import numpy as np
import pytest

import flowgrad as fg
from conftest import gradcheck, make, non_contiguous, on

F = fg.nn.functional
COMPOSITE = fg._core.functional._cross_entropy_composite


def np_cross_entropy(logits, target, ignore_index, smoothing, reduction):
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    loss = -(1 - smoothing) * np.take_along_axis(logp, safe[:, None], 1)[:, 0] - smoothing * logp.mean(1)
    loss = loss * valid
    if reduction == "none":
        return loss
    with np.errstate(invalid="ignore"):  # every row ignored: 0 / 0 = nan, as in PyTorch
        return loss.sum() / valid.sum() if reduction == "mean" else loss.sum()


CASES = [(6, 5), (45, 65), (1, 1), (3, 1), (7, 300), (700, 96)]  # the last: rows over both threads


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.15])
def test_fused_matches_composite_and_numpy(rng, device, reduction, smoothing):
    for n, c in CASES:
        logits = make(rng, (n, c)) * 4
        target = rng.integers(0, c, size=n)
        target[::3] = -1  # ignored rows
        args = dict(ignore_index=-1, label_smoothing=smoothing, reduction=reduction)
        fused = F.cross_entropy(fg.tensor(logits).to(device), fg.tensor(target).to(device), **args)
        composite = COMPOSITE(fg.tensor(logits), fg.tensor(target), **args)
        np.testing.assert_allclose(fused.cpu().numpy(), composite.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(fused.cpu().numpy(), np_cross_entropy(logits, target, -1, smoothing, reduction),
                                   rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_gradient_matches_composite(rng, device, reduction):
    logits = make(rng, (9, 7), np.float32) * 3
    target = np.array([0, 6, 2, 4, -100, 1, 3, 3, -100])
    upstream = make(rng, (9,), np.float32) if reduction == "none" else np.float32(1.7)
    grads = []
    for fn, dev in ((F.cross_entropy, device), (COMPOSITE, "cpu")):
        x = fg.tensor(logits, requires_grad=True)
        loss = fn(on(dev, x), fg.tensor(target).to(dev), label_smoothing=0.1, reduction=reduction)
        (loss * fg.tensor(upstream).to(dev)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)
    assert np.all(grads[0][4] == 0) and np.all(grads[0][8] == 0)  # ignored rows


def test_fused_gradcheck_and_double_backward(rng):
    target = np.array([1, 0, 3, -100, 3])
    for reduction in ("mean", "sum", "none"):
        gradcheck(lambda x: F.cross_entropy(x, fg.tensor(target), label_smoothing=0.2, reduction=reduction) * 1.5,
                  make(rng, (5, 4)))
    gradcheck(lambda x: F.cross_entropy(x, fg.tensor(2)), make(rng, (6,)))  # unbatched (C,)
    spatial_target = fg.tensor(rng.integers(0, 3, size=(2, 4)))
    gradcheck(lambda x: F.cross_entropy(x, spatial_target), make(rng, (2, 3, 4)))  # (N, C, d1) -> (N*d1, C)
    # create_graph: the gradient is built from differentiable ops, so it has a gradient of its own
    x = fg.tensor(make(rng, (5, 4)), dtype=fg.float64, requires_grad=True)
    (g,) = fg.autograd.grad(F.cross_entropy(x, fg.tensor(target), label_smoothing=0.2), [x], create_graph=True)
    (gg,) = fg.autograd.grad((g * g).sum(), [x])
    xc = fg.tensor(x.detach().numpy(), dtype=fg.float64, requires_grad=True)
    (gc,) = fg.autograd.grad(COMPOSITE(xc, fg.tensor(target), label_smoothing=0.2), [xc], create_graph=True)
    (ggc,) = fg.autograd.grad((gc * gc).sum(), [xc])
    np.testing.assert_allclose(gg.numpy(), ggc.numpy(), rtol=1e-10, atol=1e-12)


def test_fused_layouts_dtypes_and_edges(rng, device):
    logits = make(rng, (5, 8))
    target = np.array([7, 0, 3, 3, 1], np.int32)
    expected = np_cross_entropy(logits, target.astype(np.int64), -100, 0.0, "mean")
    got = F.cross_entropy(on(device, non_contiguous(np.ascontiguousarray(logits.T)).transpose(0, 1)),
                          fg.tensor(target).to(device))
    np.testing.assert_allclose(got.item(), expected, rtol=1e-12)
    half = F.cross_entropy(fg.tensor(logits, dtype=fg.bfloat16).to(device), fg.tensor(target).to(device))
    assert half.dtype == fg.bfloat16 and abs(half.float().item() - expected) < 0.05
    all_ignored = F.cross_entropy(fg.tensor(logits).to(device), fg.tensor(np.full(5, -100)).to(device))
    assert np.isnan(all_ignored.item())  # 0 / 0, like the composite and PyTorch
    empty = F.cross_entropy(fg.zeros(0, 4).to(device), fg.zeros(0, dtype=fg.int64).to(device), reduction="sum")
    assert empty.item() == 0.0
    nan_rows = np.zeros((3, 40))
    nan_rows[1, 35] = np.nan  # past the 32 lanes of the row maximum: that row's loss is NaN, the others not
    per_row = F.cross_entropy(fg.tensor(nan_rows).to(device), fg.tensor([0, 0, 0]).to(device), reduction="none")
    np.testing.assert_array_equal(np.isnan(per_row.cpu().numpy()), [False, True, False])
    inf_row = np.array([[-np.inf, 0.0, -np.inf]])
    assert F.cross_entropy(fg.tensor(inf_row).to(device), fg.tensor([1]).to(device)).item() == 0.0
    smoothed = F.cross_entropy(fg.tensor(inf_row).to(device), fg.tensor([1]).to(device), label_smoothing=0.1)
    assert smoothed.item() == np.inf  # -inf logits take part in the smoothing term, as in the composite


def test_fused_errors():
    logits = fg.zeros(6, 5)
    with pytest.raises(fg.IndexOutOfRangeError, match="cross_entropy: target 7 is out of range for 5 classes"):
        F.cross_entropy(logits, fg.tensor([7, 0, 0, 0, 0, 0]))
    with pytest.raises(fg.IndexOutOfRangeError, match="cross_entropy: target -3 is out of range for 5 classes"):
        F.cross_entropy(logits, fg.tensor([-3, 0, 0, 0, 0, 0]), label_smoothing=0.5)
    with pytest.raises(fg.ShapeError, match=r"cross_entropy: target \(6, 1\) does not match input \(6, 5\)"):
        F.cross_entropy(logits, fg.zeros(6, 1, dtype=fg.int64))
    with pytest.raises(fg.DTypeError, match="cross_entropy: class targets must be int32 or int64, got bool"):
        F.cross_entropy(logits, fg.zeros(6, dtype=fg.bool))
    with pytest.raises(fg.InvalidArgumentError, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        F.cross_entropy(logits, fg.zeros(6, dtype=fg.int64), label_smoothing=1.5)


def test_cross_entropy_loss_module_uses_the_fused_op(rng):
    logits = fg.tensor(make(rng, (4, 3)), requires_grad=True)
    loss = fg.nn.CrossEntropyLoss(label_smoothing=0.1)(logits, fg.tensor([0, 2, 1, 1]))
    assert "cross_entropy" in repr(loss.grad_fn).lower()
    loss.backward()
    assert logits.grad.shape == (4, 3)
