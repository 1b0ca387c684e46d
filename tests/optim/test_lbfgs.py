"""LBFGS: a quadratic solved to its closed-form minimum, steps equal to PyTorch's (when installed)
on a regression, the closure's first loss returned, and the documented errors."""
import numpy as np
import pytest

import flowgrad as fg


def test_minimises_a_quadratic_to_its_closed_form(rng):
    m = rng.standard_normal((5, 5))
    a, b = m @ m.T + 5 * np.eye(5), rng.standard_normal(5)
    x = fg.nn.Parameter(fg.zeros(5, dtype=fg.float64))
    opt = fg.optim.LBFGS([x], lr=1.0, max_iter=50, history_size=10, tolerance_grad=1e-12, tolerance_change=1e-15)
    A, B = fg.tensor(a), fg.tensor(b)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (A @ x)).sum() - (B * x).sum()
        loss.backward()
        return loss

    first = opt.step(closure)
    assert first.item() == 0.0
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(a, b), rtol=1e-6, atol=1e-8)


def test_matches_torch_on_a_regression(rng):
    torch = pytest.importorskip("torch")
    xs = rng.standard_normal((32, 3)).astype(np.float32)
    ys = (xs @ np.array([1.5, -2.0, 0.5], np.float32) + 0.3 + rng.standard_normal(32).astype(np.float32))[:, None]
    torch.manual_seed(0)
    ours, theirs = fg.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    ours.load_state_dict({k: fg.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    runs = []
    for lib, model in ((fg, ours), (torch, theirs)):
        opt = lib.optim.LBFGS(model.parameters(), lr=0.5, max_iter=8, history_size=4)
        x, y = lib.tensor(xs), lib.tensor(ys)

        def closure():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            return loss

        runs.append([opt.step(closure).item() for _ in range(3)])
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5)
    assert runs[0][-1] < runs[0][0]


def test_errors():
    p = fg.nn.Parameter(fg.ones(2))
    with pytest.raises(fg.InvalidArgumentError, match="LBFGS: line_search_fn 'strong_wolfe' is not supported"):
        fg.optim.LBFGS([p], line_search_fn="strong_wolfe")
    with pytest.raises(fg.InvalidArgumentError, match="LBFGS: expected one parameter group"):
        fg.optim.LBFGS([{"params": [p]}, {"params": [fg.nn.Parameter(fg.ones(1))]}])
    with pytest.raises(fg.InvalidArgumentError, match="LBFGS: max_iter and history_size must be positive, got 0"):
        fg.optim.LBFGS([p], max_iter=0)
