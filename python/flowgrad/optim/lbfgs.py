"""L-BFGS as PyTorch has it (torch.optim.LBFGS without a line search): step(closure) re-evaluates
the loss up to max_iter times, each time stepping along the two-loop recursion's direction over
the last history_size curvature pairs, the first step scaled to min(1, 1 / |g|_1) * lr. The
parameters travel as one flat vector; the few scalars it decides on are read on the host, as in
PyTorch."""
from .. import _core
from .._grad_mode import enable_grad, no_grad
from . import Optimizer, _invalid


class LBFGS(Optimizer):
    """L-BFGS over one parameter group; step(closure) returns the closure's first loss."""

    def __init__(self, params, lr=1.0, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None):
        if line_search_fn is not None:
            raise _invalid(f"LBFGS: line_search_fn {line_search_fn!r} is not supported; flowgrad's LBFGS takes "
                           "fixed steps of lr (line_search_fn=None)")
        if max_iter <= 0 or history_size <= 0:
            raise _invalid(f"LBFGS: max_iter and history_size must be positive, got {max_iter} and {history_size}")
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval or max_iter * 5 // 4,
                                      tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=None))
        if len(self.param_groups) != 1:
            raise _invalid("LBFGS: expected one parameter group")
        self._params = self.param_groups[0]["params"]
        self._memory = {"n_iter": 0, "func_evals": 0}

    def _flat_grad(self):
        return _core.cat([p.grad.reshape(-1) if p.grad is not None else _core.zeros(p.numel(), dtype=p.dtype,
                                                                                     device=p.device)
                          for p in self._params], 0)

    def _add_to_params(self, step, direction):
        with no_grad():
            at = 0
            for p in self._params:
                n = p.numel()
                p.add_(direction.narrow(0, at, n).reshape(*p.shape) * step)
                at += n

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
        with enable_grad():
            first = closure()
        loss = float(first)
        evals = 1
        m["func_evals"] += 1
        grad = self._flat_grad()
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
            if (grad * direction).sum().item() > -tol_change:
                break
            self._add_to_params(t, direction)
            if n_iter != max_iter:
                with enable_grad():
                    loss = float(closure())
                grad = self._flat_grad()
                evals += 1
                m["func_evals"] += 1
            if n_iter == max_iter or evals >= group["max_eval"] or grad.abs().max().item() <= tol_grad:
                break
            if (direction * t).abs().max().item() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        return first

    def plan_state(self):
        raise _invalid("LBFGS: a step calls its closure several times; fg.compile cannot record it as one plan")
