"""fg.optim: SGD, Adam and AdamW with param groups, their updates fused C++ update ops; RMSprop,
Adagrad and Adadelta, their updates composed from in-place ops per parameter; LBFGS (step(closure)).

Each step makes one C++ call per param group (SGD, Adam, AdamW). State (momentum buffers, Adam
moments, step counters) and hyper-parameters live in tensors on the parameters' device: a step
first writes each group's options into its hyper-parameter tensor, then runs the group's
multi-tensor update ops (or one update op per parameter with foreach=False), so compiled steps
(fg.compile) replay the same ops and see scheduler changes.
"""
import contextlib
import copy

from .. import _core
from .._grad_mode import no_grad
from . import lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS", "ClipGradNorm", "lr_scheduler"]


def _invalid(message):
    return _core.InvalidArgumentError(message)


# PyTorch's optimizer flags, all handled here (Optimizer._take_flags); each optimizer takes those
# its torch.optim namesake takes (_flags). maximize ascends: the gradient is negated before the
# update reads it, as PyTorch does (the fused updates' 'maximize' slot, or before a composed
# update), per param group, in eager and compiled steps alike. foreach picks multi-tensor or
# per-parameter update ops where both exist (the same numbers). fused and capturable change
# nothing: the updates are already single ops or composed ones fg.compile can fuse, and every
# state and hyper-parameter tensor lives on the parameters' device, so captured steps replay them.
# differentiable=True cannot be honoured (steps run under no_grad) and raises.
_FLAG_DEFAULTS = {"maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": None}


class Optimizer:
    """Base class: param_groups (list of dicts with 'params' and options) and per-parameter state.

    `foreach` (True unless set to False on the instance or in the constructor) updates a group's
    parameters with multi-tensor ops (a few launches per step; the numbers are bitwise those of
    one update op per parameter) when they share a device and dtype.

    Every optimizer takes the flags its torch.optim namesake takes: maximize=True (a group option:
    ascend, the gradient negated as PyTorch does), foreach, and fused / capturable, which change
    nothing here; differentiable=True raises InvalidArgumentError (see _FLAG_DEFAULTS)."""

    _state_keys = ()
    _flags = ()  # the PyTorch flags (_FLAG_DEFAULTS) the constructor takes, as torch.optim's namesake
    foreach = True
    _scope = None  # while traced_step runs: the tracer's update scope of one parameter (fg.compile)

    def __init__(self, params, defaults, **flags):
        self.defaults = {**defaults, **self._take_flags(flags)}
        self.param_groups = []
        self.state = {}  # parameter -> {name: tensor}
        self._cache = {}
        self._hyper = {}  # group index -> float64 tensor of the group's options (see _hyper_values)
        groups = list(params) if not isinstance(params, _core.Tensor) else [params]
        if not groups:
            raise _invalid(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def _take_flags(self, flags):
        """Checks PyTorch's flags (see _FLAG_DEFAULTS), sets foreach and returns the group option
        they make: maximize (none for an optimizer without it)."""
        name = type(self).__name__
        unknown = sorted(set(flags) - set(self._flags) - {"foreach"})
        if unknown:
            raise TypeError(f"{name}.__init__() got an unexpected keyword argument {unknown[0]!r}")
        options = {k: flags.get(k, _FLAG_DEFAULTS[k]) for k in self._flags}
        if options.get("differentiable"):
            raise _invalid(f"{name}: differentiable=True is not supported: flowgrad's optimizer steps run under "
                           "no_grad, so autograd cannot differentiate through them")
        if options.get("fused") and flags.get("foreach"):
            raise _invalid(f"{name}: fused and foreach cannot both be True")
        self.foreach = flags.get("foreach") is not False
        return {"maximize": bool(options["maximize"])} if "maximize" in options else {}

    def add_param_group(self, group):
        """Adds a group: {'params': [...], option: value, ...}; missing options take the defaults."""
        group = dict(group)
        params = group["params"]
        params = [params] if isinstance(params, _core.Tensor) else list(params)
        for p in params:
            if not isinstance(p, _core.Tensor):
                raise _invalid(f"{type(self).__name__}: params must be tensors, got {type(p).__name__}")
            if not p.dtype.is_floating_point or not p.is_leaf:
                raise _invalid(f"{type(self).__name__}: can only optimize floating leaf tensors, got {p.dtype!r}")
        taken = {q for g in self.param_groups for q in g["params"]}
        if any(p in taken for p in params):
            raise _invalid(f"{type(self).__name__}: a parameter appears in more than one group")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        unknown = set(group) - set(self.defaults) - {"params"}
        if unknown:
            raise _invalid(f"{type(self).__name__}: unknown options {sorted(unknown)}")
        self._validate(group)
        group["params"] = params
        self.param_groups.append(group)
        self._cache.clear()
        self._hyper.clear()

    def __getstate__(self):  # pickle/deepcopy: the per-step cache is rebuilt on the next step
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._cache = {}

    def _validate(self, group):
        if group["lr"] < 0:
            raise _invalid(f"{type(self).__name__}: lr must be >= 0, got {group['lr']}")

    def zero_grad(self, set_to_none=True):
        """Clears the gradients of every optimized parameter: None, or zeros with set_to_none=False."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad = _core.zeros(*p.shape, dtype=p.dtype, device=p.device)

    def _layout(self, group):
        """Which state the group's options need (e.g. whether SGD has momentum): a change rebuilds it."""
        return ()

    def _group_state(self, index):
        """Per-group lists of parameters and state tensors, built once per layout of the group's
        options and reused every step; state an option now needs (momentum set > 0 after creating
        the optimizer with 0) is created then."""
        group = self.param_groups[index]
        layout = self._layout(group)
        cached = self._cache.get(index)
        if cached is None or cached[0] != layout:
            for p in group["params"]:
                own = self.state.get(p, {})
                if any(own.get(k) is None for k in self._state_keys):
                    fresh = self._init_state(p, group)
                    self.state[p] = {k: own.get(k) if own.get(k) is not None else fresh.get(k)
                                     for k in {**fresh, **own}}
            cached = self._cache[index] = (layout, [group["params"]] + [[self.state[p].get(k) for p in group["params"]]
                                                                        for k in self._state_keys])
        return cached[1]

    def plan_identity(self):
        """What a compiled step's plan was traced with besides the model: per group the state its
        options need, its hyper-parameter tensor, and per parameter whether it trains and which
        state tensors it has (hash is a tensor's identity). fg.compile compares it before every
        call: a new group, loaded state or an option needing new state traces again. Creates nothing."""
        return tuple(((self._layout(group), group.get("maximize")), hash(self._hyper[i]) if i in self._hyper else None,
                      tuple((hash(p), p.requires_grad, tuple(hash(t) for t in self.state.get(p, {}).values() if t is not None))
                            for p in group["params"]))
                     for i, group in enumerate(self.param_groups))

    def state_dict(self):
        """{'state': {index: {name: tensor}}, 'param_groups': [options + 'params': [indices]]}."""
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index.setdefault(p, len(index))
                ids.append(index[p])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[p]: {k: v for k, v in s.items() if v is not None} for p, s in self.state.items() if p in index}
        return {"state": state, "param_groups": copy.deepcopy(groups)}

    def load_state_dict(self, state_dict):
        """Restores options and state saved by state_dict (for the same parameter layout)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(own["params"]) for g, own in zip(groups, self.param_groups)):
            raise _invalid(f"{type(self).__name__}.load_state_dict: the saved groups do not match this optimizer's "
                           f"({[len(g['params']) for g in groups]} vs {[len(g['params']) for g in self.param_groups]} params)")
        self.state = {}
        for saved, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in saved.items() if k != "params"})
            for i, p in zip(saved["params"], own["params"]):
                entry = state_dict["state"].get(i)
                if entry is not None:
                    self.state[p] = {k: _core.tensor(v).to(p.device) for k, v in entry.items()}
        self._cache.clear()
        self._hyper.clear()

    def _hyper_tensor(self, index):
        """The group's hyper-parameter tensor on its parameters' device, written from its options."""
        device = self.param_groups[index]["params"][0].device
        hyper = self._hyper.get(index)
        if hyper is None or hyper.device != device:
            hyper = _core.zeros(len(self._hyper_slots), dtype=_core.float64, device=device)
            self._hyper[index] = hyper
        return hyper

    def _write_hypers(self):
        """Writes every group's current options (a scheduler may have changed them) into its tensor."""
        for i, group in enumerate(self.param_groups):
            _core.optim.write_hyper(self._hyper_tensor(i), self._hyper_values(i, group))

    def _after_step(self):
        """Host bookkeeping after every group was updated (eager or compiled)."""

    def step(self):
        """One update of every parameter that has a gradient."""
        self._write_hypers()
        for i in range(len(self.param_groups)):
            self._update(i, self.foreach)
        self._after_step()

    # The hooks fg.compile uses: the state a plan reads and writes, the update ops it records,
    # and the frame around each run of the plan.

    def plan_state(self):
        """For compiling a step: ``(state, names)``. `state` lists the tensors the update ops change
        in place (momentum buffers, Adam moments and step counters), creating missing ones; `names`
        labels those and each group's hyper-parameter tensor for the plan's text, as
        ``(label, tensor)`` pairs: ``'exp_avg[3]'`` belongs to parameter 3 (counted over
        param_groups), ``'hyper0'`` holds group 0's options. The hyper-parameter tensors exist and
        hold the current options on return."""
        state, names, index = [], [], 0
        for i, group in enumerate(self.param_groups):
            _, *lists = self._group_state(i)
            for key, tensors in zip(self._state_keys, lists):
                pairs = [(f"{key}[{index + k}]", t) for k, t in enumerate(tensors) if t is not None]
                state += [t for _, t in pairs]
                names += pairs
            index += len(group["params"])
        self._write_hypers()
        names = [(f"hyper{i}", self._hyper_tensor(i)) for i in range(len(self.param_groups))] + names
        return state, names

    def traced_step(self, grads, foreach=None, scope=None):
        """For compiling a step: runs the update ops for `grads`, one gradient (or None) per
        parameter of param_groups in order, as a tracer records them: multi-tensor ops (one per
        group) when `foreach` (default: the optimizer's) is true,
        else one update op per parameter (fg.compile asks for that when the step has switch or
        while_ branches: an update guarded by a branch must cover only the parameters it trains).
        `scope()`, when given, is a context manager around each parameter's update ops when they
        are several (composed optimizers): the plan guards them as one. Each parameter's .grad is
        left as it was."""
        foreach = self.foreach if foreach is None else foreach
        params = [p for group in self.param_groups for p in group["params"]]
        if len(grads) != len(params):
            raise _invalid(f"{type(self).__name__}.traced_step: got {len(grads)} gradients for {len(params)} parameters")
        saved = [p.grad for p in params]
        try:
            for p, g in zip(params, grads):
                p.grad = g
            self._scope = scope
            for i in range(len(self.param_groups)):
                self._update(i, foreach)
        finally:
            self._scope = None
            for p, g in zip(params, saved):
                p.grad = g

    def run_compiled(self, run):
        """For running a compiled step: ``run()`` performs this optimizer's updates (a plan that
        recorded traced_step). Writes the current options first (a scheduler may have changed
        them), does the host bookkeeping of a step after, and returns what run returned."""
        self._write_hypers()
        out = run()
        self._after_step()
        return out


class SGD(Optimizer):
    """SGD with momentum, dampening, Nesterov momentum and (L2) weight decay."""

    _state_keys = ("momentum_buffer",)
    _hyper_slots = _core.optim.SGD_SLOTS
    _flags = ("maximize", "foreach", "differentiable", "fused")

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0,
                 foreach=None, **flags):
        self._fresh = set()  # ids of groups whose momentum buffers have not been used yet
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                                      weight_decay=weight_decay), foreach=foreach, **flags)

    def _validate(self, group):
        super()._validate(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise _invalid("SGD: nesterov needs momentum > 0 and dampening = 0")

    def _layout(self, group):
        return group["momentum"] != 0

    def _init_state(self, p, group):
        if group["momentum"] == 0:
            return {"momentum_buffer": None}
        # The buffer exists from the start (zeros); until the group's first step the 'first' slot
        # makes the update start it from the gradient, as PyTorch does.
        self._fresh.add(id(group))
        return {"momentum_buffer": _core.zeros(*p.shape, dtype=p.dtype, device=p.device)}

    def _hyper_values(self, index, group):
        self._group_state(index)  # creates the buffers (and marks the group fresh) on first use
        return [group["lr"], group["momentum"], group["dampening"], group["weight_decay"],
                float(group["nesterov"]), float(id(group) in self._fresh), float(group["maximize"])]

    def _update(self, index, foreach):
        params, bufs = self._group_state(index)
        _core.optim.sgd_step(params, bufs if self.param_groups[index]["momentum"] != 0 else [],
                             self._hyper_tensor(index), foreach=foreach)

    def _after_step(self):
        self._fresh.clear()

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._fresh.clear()  # loaded buffers continue; parameters without one start fresh on first use


class Adam(Optimizer):
    """Adam (Kingma & Ba) with L2 weight decay added to the gradient."""

    _state_keys = ("exp_avg", "exp_avg_sq", "step")
    _decoupled = False
    _flags = ("foreach", "maximize", "capturable", "differentiable", "fused")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=None, **flags):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay),
                         foreach=foreach, **flags)

    def _validate(self, group):
        super()._validate(group)
        b1, b2 = group["betas"]
        if not (0 <= b1 < 1 and 0 <= b2 < 1) or group["eps"] < 0:
            raise _invalid(f"{type(self).__name__}: betas must be in [0, 1) and eps >= 0, got {group['betas']}, {group['eps']}")

    _hyper_slots = _core.optim.ADAM_SLOTS

    def _init_state(self, p, group):
        return {"exp_avg": _core.zeros(*p.shape, dtype=p.dtype, device=p.device),
                "exp_avg_sq": _core.zeros(*p.shape, dtype=p.dtype, device=p.device),
                "step": _core.zeros((), dtype=_core.int64, device=p.device)}  # advanced by the update op

    def _hyper_values(self, index, group):
        b1, b2 = group["betas"]
        return [group["lr"], b1, b2, group["eps"], group["weight_decay"], float(self._decoupled),
                float(group["maximize"])]

    def _update(self, index, foreach):
        params, m1, m2, steps = self._group_state(index)
        _core.optim.adam_step(params, m1, m2, steps, self._hyper_tensor(index), foreach=foreach)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p -= lr * wd * p each step."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=None, **flags):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach, **flags)


class _Composed(Optimizer):
    """Optimizers whose update is composed from in-place ops, per parameter. The options are read
    from the group's hyper-parameter tensor (cast to the parameter's dtype), so compiled steps see
    a scheduler's changes; which terms exist (momentum, centering, weight decay) is decided by
    whether those options are 0 when the step runs, so a compiled step keeps the terms it was
    traced with. A strided parameter is updated through a contiguous copy written back."""

    _hyper_slots = ()

    def _update(self, index, foreach):
        params, *states = self._group_state(index)
        group = self.param_groups[index]
        hyper = self._hyper_tensor(index)
        with no_grad():
            # The options in each parameter dtype of the group, converted once per step and outside
            # every parameter's update (a compiled step may skip one: its values are not shared).
            cast = {dtype: hyper.to(dtype=dtype) for dtype in {p.dtype for p in params if p.grad is not None}}
            for i, p in enumerate(params):
                if p.grad is None:
                    continue
                with self._scope() if self._scope is not None else contextlib.nullcontext():
                    g = p.grad if p.grad.dtype == p.dtype else p.grad.to(dtype=p.dtype)
                    g = -g if group["maximize"] else g
                    work = p if p.is_contiguous() else p.contiguous()
                    self._apply(work, g, [s[i] for s in states], hyper, cast[p.dtype], group)
                    if work is not p:
                        p.copy_(work)


class RMSprop(_Composed):
    """RMSprop (Hinton), PyTorch's form: square_avg = alpha * square_avg + (1 - alpha) * g^2, the
    step g / (sqrt(square_avg) + eps) (centered: of square_avg - grad_avg^2), through a momentum
    buffer when momentum > 0; L2 weight decay added to g."""

    _state_keys = ("square_avg", "momentum_buffer", "grad_avg")
    _flags = ("capturable", "foreach", "maximize", "differentiable")
    _hyper_slots = ("lr", "alpha", "eps", "weight_decay", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 foreach=None, **flags):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered), foreach=foreach, **flags)

    def _validate(self, group):
        super()._validate(group)
        if not (0 <= group["alpha"] <= 1 and group["eps"] >= 0 and group["momentum"] >= 0
                and group["weight_decay"] >= 0):
            raise _invalid(f"RMSprop: need 0 <= alpha <= 1 and eps, momentum, weight_decay >= 0, got alpha="
                           f"{group['alpha']}, eps={group['eps']}, momentum={group['momentum']}, "
                           f"weight_decay={group['weight_decay']}")

    def _layout(self, group):
        return group["momentum"] > 0, bool(group["centered"])

    def _init_state(self, p, group):
        def zeros():
            return _core.zeros(*p.shape, dtype=p.dtype, device=p.device)
        return {"square_avg": zeros(), "momentum_buffer": zeros() if group["momentum"] > 0 else None,
                "grad_avg": zeros() if group["centered"] else None}

    def _hyper_values(self, index, group):
        return [group["lr"], group["alpha"], group["eps"], group["weight_decay"], group["momentum"]]

    def _apply(self, p, g, state, h64, h, group):
        square_avg, buf, grad_avg = state
        lr, alpha, eps, wd, momentum = h[0], h[1], h[2], h[3], h[4]
        if group["weight_decay"] != 0:
            g = g + p * wd
        square_avg.mul_(alpha).add_(g * g * (1 - alpha))
        if grad_avg is not None:
            grad_avg.mul_(alpha).add_(g * (1 - alpha))
            avg = (square_avg - grad_avg * grad_avg).sqrt() + eps
        else:
            avg = square_avg.sqrt() + eps
        if buf is not None:
            buf.mul_(momentum).add_(g / avg)
            p.sub_(buf * lr)
        else:
            p.sub_(g / avg * lr)


class Adagrad(_Composed):
    """Adagrad (Duchi et al.), PyTorch's form: sum += g^2, p -= clr * g / (sqrt(sum) + eps) with
    clr = lr / (1 + (step - 1) * lr_decay); L2 weight decay added to g; the sum starts at
    initial_accumulator_value."""

    _state_keys = ("sum", "step")
    _flags = ("foreach", "maximize", "differentiable", "fused")
    _hyper_slots = ("lr", "lr_decay", "weight_decay", "eps")

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 foreach=None, **flags):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps),
                         foreach=foreach, **flags)

    def _validate(self, group):
        super()._validate(group)
        if min(group["lr_decay"], group["weight_decay"], group["initial_accumulator_value"], group["eps"]) < 0:
            raise _invalid(f"Adagrad: lr_decay, weight_decay, initial_accumulator_value and eps must be >= 0, got "
                           f"{group['lr_decay']}, {group['weight_decay']}, {group['initial_accumulator_value']}, "
                           f"{group['eps']}")

    def _init_state(self, p, group):
        return {"sum": _core.full(tuple(p.shape), group["initial_accumulator_value"], dtype=p.dtype, device=p.device),
                "step": _core.zeros((), dtype=_core.float64, device=p.device)}

    def _hyper_values(self, index, group):
        return [group["lr"], group["lr_decay"], group["weight_decay"], group["eps"]]

    def _apply(self, p, g, state, h64, h, group):
        total, step = state
        step.add_(1)
        clr = (h64[0] / ((step - 1) * h64[1] + 1)).to(dtype=p.dtype)  # the step count in float64
        if group["weight_decay"] != 0:
            g = g + p * h[2]
        total.add_(g * g)
        p.sub_(g / (total.sqrt() + h[3]) * clr)


class Adadelta(_Composed):
    """Adadelta (Zeiler), PyTorch's form: square_avg = rho * square_avg + (1 - rho) * g^2, the update
    delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g, acc_delta = rho * acc_delta +
    (1 - rho) * delta^2, p -= lr * delta; L2 weight decay added to g."""

    _state_keys = ("square_avg", "acc_delta")
    _flags = ("foreach", "capturable", "maximize", "differentiable")
    _hyper_slots = ("lr", "rho", "eps", "weight_decay")

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, foreach=None, **flags):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay), foreach=foreach, **flags)

    def _validate(self, group):
        super()._validate(group)
        if not (0 <= group["rho"] <= 1 and group["eps"] >= 0 and group["weight_decay"] >= 0):
            raise _invalid(f"Adadelta: need 0 <= rho <= 1 and eps, weight_decay >= 0, got rho={group['rho']}, "
                           f"eps={group['eps']}, weight_decay={group['weight_decay']}")

    def _init_state(self, p, group):
        return {key: _core.zeros(*p.shape, dtype=p.dtype, device=p.device) for key in self._state_keys}

    def _hyper_values(self, index, group):
        return [group["lr"], group["rho"], group["eps"], group["weight_decay"]]

    def _apply(self, p, g, state, h64, h, group):
        square_avg, acc_delta = state
        lr, rho, eps, wd = h[0], h[1], h[2], h[3]
        if group["weight_decay"] != 0:
            g = g + p * wd
        square_avg.mul_(rho).add_(g * g * (1 - rho))
        delta = (acc_delta + eps).sqrt() / (square_avg + eps).sqrt() * g
        acc_delta.mul_(rho).add_(delta * delta * (1 - rho))
        p.sub_(delta * lr)


from .lbfgs import LBFGS  # noqa: E402  (it builds on Optimizer above)
from .clip import ClipGradNorm  # noqa: E402
from .adam_variants import Adamax, NAdam, RAdam  # noqa: E402  (they build on _Composed above)
