"""LBFGS: a quadratic solved to its closed-form minimum, steps equal to PyTorch's (when installed)
on a regression, the closure's first loss returned, the strong-Wolfe line search (Rosenbrock and
least squares solved, every accepted step checked against the Wolfe conditions, the iterates and
evaluation counts of PyTorch's) and the documented errors."""
import inspect

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
    with pytest.raises(fg.InvalidArgumentError, match="LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                                                      "'backtracking'"):
        fg.optim.LBFGS([p], line_search_fn="backtracking")
    with pytest.raises(fg.InvalidArgumentError, match="LBFGS: expected one parameter group"):
        fg.optim.LBFGS([{"params": [p]}, {"params": [fg.nn.Parameter(fg.ones(1))]}])
    with pytest.raises(fg.InvalidArgumentError, match="LBFGS: max_iter and history_size must be positive, got 0"):
        fg.optim.LBFGS([p], max_iter=0)


def rosenbrock(lib, x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def least_squares(lib, x, a, b):
    return ((a @ x - b) ** 2).sum()


def counted_closure(lib, opt, x, objective, trace):
    """The closure: loss and gradient at x, each evaluation appended to trace as (x, f, g)."""
    def closure():
        opt.zero_grad()
        loss = objective(lib, x)
        loss.backward()
        trace.append((x.detach().numpy().copy(), loss.item(), x.grad.numpy().copy()))
        return loss
    return closure


def test_strong_wolfe_solves_rosenbrock_and_every_step_meets_the_conditions():
    x = fg.nn.Parameter(fg.tensor([-1.2, 1.0], dtype=fg.float64))
    opt = fg.optim.LBFGS([x], lr=1, max_iter=1, max_eval=30, line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                         tolerance_change=1e-14)
    trace = []
    closure = counted_closure(fg, opt, x, rosenbrock, trace)
    checked = 0
    for _ in range(60):
        before = len(trace)
        opt.step(closure)  # one iteration: the start's evaluation, then the line search's
        start_x, f0, g0 = trace[before]
        s = x.detach().numpy() - start_x  # t * d of the accepted step
        if not s.any():
            break
        end = [e for e in trace[before + 1:] if np.array_equal(e[0], x.detach().numpy())]
        assert end, "the accepted step is a point the line search evaluated"
        _, f1, g1 = end[-1]
        assert f1 <= f0 + 1e-4 * (g0 @ s)  # sufficient decrease
        assert abs(g1 @ s) <= 0.9 * abs(g0 @ s) + 1e-15  # strong curvature condition
        checked += 1
    assert checked >= 15
    np.testing.assert_allclose(x.detach().numpy(), [1.0, 1.0], rtol=1e-7)


def test_strong_wolfe_solves_least_squares_to_the_normal_equations(rng):
    a, b = rng.standard_normal((30, 6)), rng.standard_normal(30)
    x = fg.nn.Parameter(fg.zeros(6, dtype=fg.float64))
    opt = fg.optim.LBFGS([x], max_iter=100, line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                         tolerance_change=1e-15)
    A, B = fg.tensor(a), fg.tensor(b)
    trace = []
    opt.step(counted_closure(fg, opt, x, lambda lib, v: least_squares(lib, v, A, B), trace))
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.lstsq(a, b, rcond=None)[0], rtol=1e-6, atol=1e-8)
    assert len(trace) <= 125  # max_eval = max_iter * 5 // 4


@pytest.mark.parametrize("problem", ["rosenbrock", "least_squares"])
@pytest.mark.parametrize("history_size, maximize", [(3, False), (100, False), (100, True)])
def test_strong_wolfe_iterates_are_pytorchs(problem, history_size, maximize, rng):
    torch = pytest.importorskip("torch")
    if maximize and "maximize" not in inspect.signature(torch.optim.LBFGS).parameters:
        pytest.skip("this PyTorch's LBFGS has no maximize")
    a, b = rng.standard_normal((20, 5)), rng.standard_normal(20)
    start = np.array([-1.2, 1.0]) if problem == "rosenbrock" else np.zeros(5)
    sign = -1.0 if maximize else 1.0
    traces = []
    for lib in (fg, torch):
        x = lib.nn.Parameter(lib.tensor(start, dtype=lib.float64))
        opt = lib.optim.LBFGS([x], lr=1, max_iter=7, history_size=history_size, line_search_fn="strong_wolfe",
                              **({"maximize": True} if maximize else {}))
        A, B = lib.tensor(a), lib.tensor(b)

        def objective(lib, v, A=A, B=B):
            return sign * (rosenbrock(lib, v) if problem == "rosenbrock" else least_squares(lib, v, A, B))
        trace = []
        closure = counted_closure(lib, opt, x, objective, trace)
        losses = [opt.step(closure).item() for _ in range(4)]
        traces.append((trace, losses, x.detach().numpy().copy()))
    (ours, our_losses, our_x), (theirs, their_losses, their_x) = traces
    assert len(ours) == len(theirs)  # the same evaluations: the same decisions in the search
    for (x1, f1, _), (x2, f2, _) in zip(ours, theirs):
        np.testing.assert_allclose(x1, x2, rtol=1e-8, atol=1e-10)
        assert f1 == pytest.approx(f2, rel=1e-8, abs=1e-12)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(our_x, their_x, rtol=1e-8, atol=1e-10)


def test_the_line_search_spends_only_what_max_eval_leaves():
    x = fg.nn.Parameter(fg.tensor([-1.2, 1.0], dtype=fg.float64))
    opt = fg.optim.LBFGS([x], max_iter=1, line_search_fn="strong_wolfe")  # max_eval = 1 * 5 // 4 = 1
    trace = []
    for _ in range(3):
        before = len(trace)
        opt.step(counted_closure(fg, opt, x, rosenbrock, trace))
        assert len(trace) - before == 2  # the start, then the line search's first point only
    opt = fg.optim.LBFGS([x], max_iter=4, max_eval=6, line_search_fn="strong_wolfe")
    before = len(trace)
    opt.step(counted_closure(fg, opt, x, rosenbrock, trace))
    assert 2 <= len(trace) - before <= 6


def test_maximize_ascends_along_the_iterates_of_the_negated_objective():
    paths = []
    for maximize in (False, True):
        x = fg.nn.Parameter(fg.tensor([-1.2, 1.0], dtype=fg.float64))
        opt = fg.optim.LBFGS([x], max_iter=10, line_search_fn="strong_wolfe", maximize=maximize)
        sign = -1.0 if maximize else 1.0
        trace = []
        closure = counted_closure(fg, opt, x, lambda lib, v: sign * rosenbrock(lib, v), trace)
        firsts = [opt.step(closure).item() for _ in range(3)]
        paths.append(([e[0] for e in trace], firsts))
    (down, down_losses), (up, up_losses) = paths
    assert len(down) == len(up) and all(np.array_equal(a, b) for a, b in zip(down, up))
    assert up_losses == [-v for v in down_losses]  # step returns the closure's own (negated) loss
    assert up_losses[-1] > up_losses[0]
