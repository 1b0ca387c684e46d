"""L-BFGS as PyTorch has it (torch.optim.LBFGS): step(closure) re-evaluates the loss up to
max_iter times, each time stepping along the two-loop recursion's direction over the last
history_size curvature pairs. Without a line search the step is lr (the first one scaled to
min(1, 1 / |g|_1) * lr); with line_search_fn="strong_wolfe" that step is where a line search
starts that ends at a point satisfying the strong Wolfe conditions (Nocedal & Wright, algorithms
3.5 and 3.6, with PyTorch's choices: cubic interpolation, c1 = 1e-4, c2 = 0.9, within the
evaluations max_eval leaves). The parameters travel as one flat vector; the few scalars it
decides on are read on the host (as float64), as in PyTorch."""
import math

from .. import _core
from .._grad_mode import enable_grad, no_grad
from . import Optimizer, _invalid


def _cubic_minimum(a, b, bounds=None):
    """The minimiser of the cubic matching value and slope at two points of the line, a and b
    (each (t, f, slope)), clamped to bounds (default: the interval they span); the bounds'
    midpoint when the cubic has no minimum (Nocedal & Wright, eq. 3.59)."""
    lo, hi = (a, b) if a[0] <= b[0] else (b, a)
    low_bound, high_bound = bounds if bounds is not None else (lo[0], hi[0])
    d1 = lo[2] + hi[2] - 3 * (lo[1] - hi[1]) / (lo[0] - hi[0])
    discriminant = d1 * d1 - lo[2] * hi[2]
    if not discriminant >= 0:
        return (low_bound + high_bound) / 2.0
    d2 = math.sqrt(discriminant)
    t = hi[0] - (hi[0] - lo[0]) * ((hi[2] + d2 - d1) / (hi[2] - lo[2] + 2 * d2))
    return min(max(t, low_bound), high_bound)


class _LinePoint:
    """One evaluated point of the line search: step t, loss f, flat gradient g, slope g . d."""
    __slots__ = ("t", "f", "g", "slope")

    def __init__(self, t, f, g, slope):
        self.t, self.f, self.g, self.slope = t, f, g, slope

    def cubic(self):
        return self.t, self.f, self.slope


def _strong_wolfe(evaluate, d, start, t, max_evals, c1=1e-4, c2=0.9, tolerance_change=1e-9):
    """A step along d satisfying f(t) <= f(0) + c1 t f'(0) and |f'(t)| <= c2 |f'(0)|.

    evaluate(t) -> (loss, flat gradient, slope) at the parameters plus t * d; start: the point at
    t = 0; max_evals: evaluations allowed after the first (when they run out growing t, the
    better of the start and the last point is taken). Phase one (N&W algorithm 3.5) grows t (by
    cubic extrapolation into [t + 0.01 (t - t_prev), 10 t]) until a point qualifies or an
    interval is known to hold one; phase two (zoom, algorithm 3.6) shrinks that interval by cubic
    interpolation, stepping 10% in from its ends when progress stalls. Returns (the point chosen,
    evaluations made)."""
    d_norm = d.abs().max().item()
    too_high = lambda p: p.f > start.f + c1 * p.t * start.slope  # noqa: E731  (sufficient decrease fails)
    curvature = lambda p: abs(p.slope) <= -c2 * start.slope  # noqa: E731
    prev, new = start, _LinePoint(t, *evaluate(t))
    evals = 1
    bracket = None
    while evals <= max_evals:
        if too_high(new) or (evals > 2 and new.f >= prev.f):
            bracket = [prev, new]
            break
        if curvature(new):
            return new, evals
        if new.slope >= 0:
            bracket = [prev, new]
            break
        t = _cubic_minimum(prev.cubic(), new.cubic(), bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev, new = new, _LinePoint(t, *evaluate(t))
        evals += 1
    if bracket is None:  # the budget ran out growing t: between the start and the last point
        bracket = [start, new]
    low = 0 if bracket[0].f <= bracket[1].f else 1
    stalled = False
    while evals <= max_evals:
        ends = (min(p.t for p in bracket), max(p.t for p in bracket))
        if (ends[1] - ends[0]) * d_norm < tolerance_change:
            break
        t = _cubic_minimum(bracket[0].cubic(), bracket[1].cubic())
        margin = 0.1 * (ends[1] - ends[0])
        if min(ends[1] - t, t - ends[0]) < margin:  # close to an end: move in after a second time
            if stalled or t >= ends[1] or t <= ends[0]:
                t = ends[1] - margin if abs(t - ends[1]) < abs(t - ends[0]) else ends[0] + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        new = _LinePoint(t, *evaluate(t))
        evals += 1
        if too_high(new) or new.f >= bracket[low].f:
            bracket[1 - low] = new
            low = 0 if bracket[0].f <= bracket[1].f else 1
            continue
        if curvature(new):
            bracket[low] = new
            break
        if new.slope * (bracket[1 - low].t - bracket[low].t) >= 0:
            bracket[1 - low] = bracket[low]
        bracket[low] = new
    return bracket[low], evals


class LBFGS(Optimizer):
    """L-BFGS over one parameter group; step(closure) returns the closure's first loss.
    maximize=True (as recent PyTorch's) ascends: the loss and its gradient are negated where the
    algorithm reads them."""

    _flags = ("maximize",)

    def __init__(self, params, lr=1.0, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None, *, maximize=False):
        if line_search_fn not in (None, "strong_wolfe"):
            raise _invalid(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
        if max_iter <= 0 or history_size <= 0:
            raise _invalid(f"LBFGS: max_iter and history_size must be positive, got {max_iter} and {history_size}")
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval or max_iter * 5 // 4,
                                      tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=line_search_fn),
                         maximize=maximize)
        if len(self.param_groups) != 1:
            raise _invalid("LBFGS: expected one parameter group")
        self._params = self.param_groups[0]["params"]
        self._memory = {"n_iter": 0, "func_evals": 0}

    def _evaluate(self, closure):
        """closure() under grad mode: (its loss, the loss as a float, the flat gradient), the last
        two negated under maximize."""
        with enable_grad():
            out = closure()
        grad = _core.cat([p.grad.reshape(-1) if p.grad is not None else _core.zeros(p.numel(), dtype=p.dtype,
                                                                                     device=p.device)
                          for p in self._params], 0)
        if self.param_groups[0]["maximize"]:
            return out, -float(out), -grad
        return out, float(out), grad

    def _add_to_params(self, step, direction):
        with no_grad():
            at = 0
            for p in self._params:
                n = p.numel()
                p.add_(direction.narrow(0, at, n).reshape(*p.shape) * step)
                at += n

    def _evaluate_along(self, closure, direction):
        """evaluate(t) for the line search: (loss, flat gradient, slope) at the parameters plus
        t * direction; the parameters are put back after each evaluation."""
        with no_grad():
            start = [p.clone() for p in self._params]

        def evaluate(t):
            self._add_to_params(t, direction)
            _, loss, grad = self._evaluate(closure)
            with no_grad():
                for p, saved in zip(self._params, start):
                    p.copy_(saved)
            return loss, grad, (grad * direction).sum().item()
        return evaluate

    @staticmethod
    def _direction(grad, dirs, steps, rho, h_diag):
        """The two-loop recursion: -H grad from the stored pairs (y in dirs, s in steps)."""
        q = -grad
        alphas = []
        for y, s, r in reversed(list(zip(dirs, steps, rho))):
            alphas.append((s * q).sum().item() * r)
            q = q - y * alphas[-1]
        d = q * h_diag
        for (y, s, r), a in zip(zip(dirs, steps, rho), reversed(alphas)):
            d = d + s * (a - (y * d).sum().item() * r)
        return d

    def step(self, closure):
        """Up to max_iter L-BFGS iterations, each calling closure() (which recomputes the loss and
        its gradients); stops early when the gradient, the step or the loss change falls below
        the tolerances. Returns the first loss closure returned."""
        group = self.param_groups[0]
        lr, max_iter, history = group["lr"], group["max_iter"], group["history_size"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        m = self._memory
        first, loss, grad = self._evaluate(closure)
        evals = 1
        m["func_evals"] += 1
        if grad.abs().max().item() <= tol_grad:
            return first
        for n_iter in range(1, max_iter + 1):
            m["n_iter"] += 1
            if m["n_iter"] == 1:
                direction, m["dirs"], m["steps"], m["rho"], m["h_diag"] = -grad, [], [], [], 1.0
            else:
                y, s = grad - m["prev_grad"], m["d"] * m["t"]
                ys = (y * s).sum().item()
                if ys > 1e-10:
                    if len(m["dirs"]) == history:
                        for key in ("dirs", "steps", "rho"):
                            m[key].pop(0)
                    m["dirs"].append(y)
                    m["steps"].append(s)
                    m["rho"].append(1.0 / ys)
                    m["h_diag"] = ys / (y * y).sum().item()
                direction = self._direction(grad, m["dirs"], m["steps"], m["rho"], m["h_diag"])
            m["prev_grad"], m["d"] = grad, direction
            prev_loss = loss
            t = min(1.0, 1.0 / grad.abs().sum().item()) * lr if m["n_iter"] == 1 else lr
            m["t"] = t
            slope = (grad * direction).sum().item()
            if slope > -tol_change:
                break
            if group["line_search_fn"] == "strong_wolfe":
                found, used = _strong_wolfe(self._evaluate_along(closure, direction), direction,
                                            _LinePoint(0.0, loss, grad, slope), t, group["max_eval"] - evals)
                loss, grad, t = found.f, found.g, found.t
                m["t"] = t
                self._add_to_params(t, direction)
            else:
                self._add_to_params(t, direction)
                used = 0
                if n_iter != max_iter:
                    _, loss, grad = self._evaluate(closure)
                    used = 1
            evals += used
            m["func_evals"] += used
            if n_iter == max_iter or evals >= group["max_eval"] or grad.abs().max().item() <= tol_grad:
                break
            if (direction * t).abs().max().item() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        return first

    def plan_state(self):
        raise _invalid("LBFGS: a step calls its closure several times; fg.compile cannot record it as one plan")
