"""ClipGradNorm: gradient-norm clipping before an optimizer's update, eagerly and in fg.compile."""
from ..nn.utils import clip_grad_norm_


class ClipGradNorm:
    """Wraps `optimizer` so that every step first scales the gradients to a total L2 norm of at
    most `max_norm` (``nn.utils.clip_grad_norm_``), then runs the optimizer's update:
    the loop ``loss.backward(); clip_grad_norm_(params, max_norm); opt.step()`` as one optimizer.

    It works eagerly and inside ``fg.compile(model, loss_fn, ClipGradNorm(opt, 1.0), ...)``: the
    norm and the scale are device ops of the plan (no host read, a captured CUDA step stays one
    graph). ``.grad`` keeps the unclipped gradients after a step in both cases (a compiled step
    clips values of its own), so compiled and eager loops show the same ``.grad``; ``last_norm``
    is the norm before clipping of the last eager step (a 0-d tensor on the gradients' device).
    Everything else (param_groups, zero_grad, state_dict, load_state_dict, schedulers) is the
    wrapped optimizer's."""

    def __init__(self, optimizer, max_norm):
        self.optimizer, self.max_norm = optimizer, float(max_norm)
        self.last_norm = None

    def __getattr__(self, name):  # param_groups, zero_grad, state_dict, plan_state, run_compiled, ...
        return getattr(self.optimizer, name)

    def __repr__(self):
        return f"ClipGradNorm({self.optimizer!r}, max_norm={self.max_norm})"

    def _params(self):
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _clipped(self, params, grads):
        """The gradients clip_grad_norm_ makes of `grads`, each parameter's .grad left as it was."""
        saved = [p.grad for p in params]
        for p, g in zip(params, grads):
            p.grad = g
        try:
            norm = clip_grad_norm_([p for p in params if p.grad is not None], self.max_norm)
            return [p.grad for p in params], norm
        finally:
            for p, g in zip(params, saved):
                p.grad = g

    def step(self, closure=None):
        params = self._params()
        unclipped = [p.grad for p in params]
        clipped, self.last_norm = self._clipped(params, unclipped)
        for p, g in zip(params, clipped):
            p.grad = g
        try:
            return self.optimizer.step() if closure is None else self.optimizer.step(closure)
        finally:
            for p, g in zip(params, unclipped):
                p.grad = g

    def traced_step(self, grads, foreach=None, scope=None):
        clipped, _ = self._clipped(self._params(), grads)
        return self.optimizer.traced_step(clipped, foreach, scope)
