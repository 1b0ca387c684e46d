"""The optimizer update ops (sgd_update, adam_update) against NumPy, on every device: hyper-
parameters and Adam's step counter are tensors the ops read (and the counter one they advance)."""
import numpy as np
import pytest

import flowgrad as fg

SHAPES = [(45, 65), (7,), (1,), (0, 3)]


def hyper(values, device):
    h = fg.zeros(len(values), dtype=fg.float64, device=device)
    fg._core.optim.write_hyper(h, values)
    return h


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("momentum,nesterov,first", [(0.0, False, False), (0.9, False, True), (0.9, False, False),
                                                      (0.9, True, False)])
@pytest.mark.parametrize("maximize", [False, True])
def test_sgd_update_matches_numpy(shape, momentum, nesterov, first, maximize, device, rng):
    p, g, buf = (rng.standard_normal(shape) for _ in range(3))
    lr, wd, damp = 0.1, 0.01, 0.0
    tp, tg, tb = (fg.tensor(a).to(device) for a in (p, g, buf))
    tp.grad = tg
    h = hyper([lr, momentum, damp, wd, float(nesterov), float(first), float(maximize)], device)
    fg._core.optim.sgd_step([tp], [tb] if momentum else [], h)  # one sgd_update op
    d = (-g if maximize else g) + wd * p
    if momentum:
        mom = d if first else momentum * buf + (1 - damp) * d
        np.testing.assert_allclose(tb.cpu().numpy(), mom, rtol=1e-12, atol=1e-12)
        d = d + momentum * mom if nesterov else mom
    np.testing.assert_allclose(tp.cpu().numpy(), p - lr * d, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("decoupled,maximize", [(False, False), (True, False), (False, True), (True, True)])
def test_adam_update_matches_numpy_and_advances_the_step(shape, decoupled, maximize, device, rng):
    p, g, m = (rng.standard_normal(shape) for _ in range(3))
    v = rng.random(shape)
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.99, 1e-8, 0.1
    tp, tg, tm, tv = (fg.tensor(a).to(device) for a in (p, g, m, v))
    tp.grad = tg
    step = fg.tensor(np.array(4, dtype=np.int64)).to(device)
    fg._core.optim.adam_step([tp], [tm], [tv], [step], hyper([lr, b1, b2, eps, wd, float(decoupled),
                                                                      float(maximize)], device))
    t = 5
    g = -g if maximize else g
    d = g if decoupled else g + wd * p
    m2 = b1 * m + (1 - b1) * d
    v2 = b2 * v + (1 - b2) * d * d
    w = p * (1 - lr * wd) if decoupled else p
    expected = w - lr / (1 - b1 ** t) * m2 / (np.sqrt(v2) / np.sqrt(1 - b2 ** t) + eps)
    np.testing.assert_allclose(tp.cpu().numpy(), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tm.cpu().numpy(), m2, rtol=1e-12)
    np.testing.assert_allclose(tv.cpu().numpy(), v2, rtol=1e-12)
    assert step.item() == 5


def test_update_ops_check_their_arguments(device):
    p = fg.zeros(3, 2, device=device)
    p.grad = fg.zeros(3, 2, device=device)
    with pytest.raises(fg.InvalidArgumentError, match=r"sgd_update: hyper-parameters must be a contiguous float64 tensor of 7"):
        fg._core.optim.sgd_step([p], [], fg.zeros(3, dtype=fg.float64, device=device))
    with pytest.raises(fg.InvalidArgumentError, match=r"sgd_update: momentum buffer float32 \(2, 3\)"):
        fg._core.optim.sgd_step([p], [fg.zeros(2, 3, device=device)], hyper([0.1, 0.9, 0, 0, 0, 0, 0], device))
    with pytest.raises(fg.InvalidArgumentError, match="adam_update: the step counter must be a one-element int64"):
        fg._core.optim.adam_step([p], [fg.zeros(3, 2, device=device)], [fg.zeros(3, 2, device=device)],
                                 [fg.zeros(2, device=device)], hyper([0.1, 0.9, 0.99, 1e-8, 0, 0, 0], device))
    ops = {op["name"]: op for op in fg._core._op_registry()}
    assert ops["sgd_update"]["family"] == ops["adam_update"]["family"] == "optim"
    assert ops["sgd_update"]["not_differentiable"] == "optimizer update"
