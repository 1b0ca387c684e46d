"""fg.compile(model) as torch.compile(model): a model compiled lazily, at its first call for each
input signature, into a forward plan and (under grad) a backward plan that eager autograd runs as
one node. An ordinary eager loop (``loss.backward(); opt.step()``) keeps working unchanged."""
import collections
import warnings

from . import _core
from .compile import _Traced, _flatten, _named, _no_grad, _check_input_writes

__all__ = ["CompiledModule"]

_SLOT = object()  # where a tensor sits among a call's arguments
# Module methods that return the module itself: through the wrapper they return the wrapper.
_RETURNS_MODEL = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "requires_grad_", "apply"})


def _split_arguments(args, kwargs):
    """(the tensors among the arguments, in order; a skeleton of everything else, hashable when the
    other arguments are). Tensors may sit in tuples, lists and dicts."""
    tensors = []

    def walk(x):
        if isinstance(x, _core.Tensor):
            tensors.append(x)
            return _SLOT
        if isinstance(x, (tuple, list)):
            return (type(x), tuple(walk(v) for v in x))
        if isinstance(x, dict):
            return (dict, tuple((k, walk(v)) for k, v in x.items()))
        return x

    return tensors, walk((tuple(args), kwargs))


def _rebuild_arguments(skeleton, tensors):
    it = iter(tensors)

    def build(x):
        if x is _SLOT:
            return next(it)
        if isinstance(x, tuple) and len(x) == 2 and x[0] in (tuple, list):
            return x[0](build(v) for v in x[1])
        if isinstance(x, tuple) and len(x) == 2 and x[0] is dict:
            return {k: build(v) for k, v in x[1]}
        return x

    args, kwargs = skeleton[1]
    return build(args), build(kwargs)


class _Eager:
    """A signature whose trace was refused: the model runs eagerly for it."""

    def __init__(self, reason):
        self.reason = reason


class CompiledModule:
    """What ``fg.compile(model)`` returns (PyTorch's ``torch.compile(model)``): call it as the model.

    Each call looks up a plan by the call's signature: every tensor argument's shape, dtype,
    device and requires_grad, the other arguments' values, whether the call differentiates (grad
    mode on and a parameter or an input requires grad) and every module's ``training`` flag. The
    first call of a signature traces the model into plans (at most ``max_plans`` signatures are
    kept, the least recently used is dropped):

    - no gradient (``fg.no_grad()``, ``fg.inference_mode()``, nothing requires grad): one forward
      plan; in-place writes into buffers (BatchNorm running statistics, a KV cache) persist.
    - under grad: a forward plan that also returns what the backward reads (activations, dropout
      masks), and a backward plan from the output gradients and those tensors to the gradients of
      the trainable parameters and of the inputs that require grad. The outputs come back attached
      to one autograd node (``grad_fn`` ``<CompiledBackward>``) holding the backward plan, so
      ``loss.backward()`` accumulates into ``.grad`` as eager autograd does and any optimizer
      updates the parameters in place, which the next call reads. The gradients are views of the
      backward plan's arena (no copy); a backward while earlier ones live writes a fresh arena.
      A saved input is the caller's tensor: writing into it before ``backward()`` raises, as in eager.

    Random ops draw what eager draws from ``fg.manual_seed``. A model the tracer refuses (a host
    read such as ``.item()`` of a computed value, an op with a data-dependent output shape, a
    FlowBuilder branch under grad, an output that is not a tensor) runs eagerly for that signature
    after one ``UserWarning`` naming the reason, unless ``fullgraph=True`` asked for an error.
    Python control flow that does not read tensor values is frozen per signature, as in a trace.

    Everything else (``parameters()``, ``state_dict()``, attributes) is the model's; ``train()``,
    ``eval()``, ``to()``, ``cuda()``, ``float()`` and the other methods that return the model
    return this wrapper. It is not an ``nn.Module`` instance itself: register the model, not the
    wrapper, as another module's child. ``stats`` counts traces,
    plans and eager calls."""

    def __init__(self, model, fullgraph=False, max_plans=8):
        if not callable(model):
            raise TypeError(f"compile: model must be a Module or a function, got {type(model).__name__}")
        if not isinstance(max_plans, int) or max_plans < 1:
            raise _core.InvalidArgumentError(f"compile: max_plans must be a positive integer, got {max_plans!r}")
        object.__setattr__(self, "_orig_mod", model)
        object.__setattr__(self, "_fullgraph", bool(fullgraph))
        object.__setattr__(self, "_max_plans", max_plans)
        object.__setattr__(self, "_plans", collections.OrderedDict())
        object.__setattr__(self, "_rebuilders", {})  # signature -> rebuilds the outputs' structure
        object.__setattr__(self, "_identity", None)  # _state(model)[0] when the plans were made
        object.__setattr__(self, "_params", [])  # the parameters then (held: their identity stays theirs)
        object.__setattr__(self, "_trainable", [])
        object.__setattr__(self, "_warned", set())
        object.__setattr__(self, "_counts", {"traces": 0, "eager_calls": 0, "plan_calls": 0})

    @property
    def module(self):
        """The compiled model (also ``_orig_mod``, PyTorch's name)."""
        return self._orig_mod

    def __getattr__(self, name):
        model = self.__dict__.get("_orig_mod")
        if model is None:  # not yet initialised (copy, unpickling): no recursion through _orig_mod
            raise AttributeError(name)
        attr = getattr(model, name)
        if name in _RETURNS_MODEL and callable(attr):  # model.to(...) returns the model: return this wrapper
            def method(*args, **kwargs):
                out = attr(*args, **kwargs)
                return self if out is model else out
            return method
        return attr

    def train(self, mode=True):
        """Sets the model's training mode (a new mode is a new signature); returns this wrapper."""
        self._orig_mod.train(mode)
        return self

    def eval(self):
        """The model in evaluation mode; returns this wrapper."""
        return self.train(False)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"

    @property
    def stats(self):
        """``traces`` (how many times the model was traced), ``plan_calls`` and ``eager_calls``
        (calls that ran plans, calls that ran the model eagerly), and ``plans``: one record per
        cached signature, least recently used first (``inputs``: (shape, dtype, device) per tensor
        argument, ``grad``: whether it differentiates, ``kind``: "forward",
        "forward+backward" or "eager", ``reason`` for eager ones, ``saved``: tensors the forward
        hands the backward)."""
        rows = []
        for key, entry in self._plans.items():
            _, tensors, differentiates, _ = key
            row = {"inputs": [(shape, str(dtype), device) for shape, dtype, device, _ in tensors],
                   "grad": differentiates}
            if isinstance(entry, _Eager):
                row.update(kind="eager", reason=entry.reason)
            elif isinstance(entry, _core.plan.AutogradPlan):
                row.update(kind="forward+backward" if entry.backward is not None else "forward", saved=entry.saved)
            else:
                row.update(kind="forward")
            rows.append(row)
        return dict(self._counts, plans=rows)

    def plans(self):
        """The cached plans by signature, least recently used first: a ``flowgrad._core.plan.Plan``
        (forward only) or a ``flowgrad._core.plan.AutogradPlan`` (``.forward``, ``.backward``), or
        None for a signature that runs eagerly."""
        return [(k, None if isinstance(e, _Eager) else e) for k, e in self._plans.items()]

    def __call__(self, *args, **kwargs):
        model = self._orig_mod
        tensors, skeleton = _split_arguments(args, kwargs)
        identity, training = _state(model)
        if identity != self._identity:  # a parameter replaced or frozen: plans read the old ones
            self._plans.clear()
            self._rebuilders.clear()
            params = [p for _, p in _named(model, "named_parameters")]
            object.__setattr__(self, "_identity", identity)
            object.__setattr__(self, "_params", params)
            object.__setattr__(self, "_trainable", [p for p in params if p.requires_grad])
        params, trainable = self._params, self._trainable
        differentiates = _core.is_grad_enabled() and (bool(trainable) or any(t.requires_grad for t in tensors))
        try:
            key = (skeleton, tuple((tuple(t.shape), t.dtype, str(t.device), differentiates and t.requires_grad)
                                   for t in tensors),
                   differentiates, training)
            hash(key)
        except TypeError as e:
            reason = f"an argument cannot be part of a plan's signature ({e})"
            if self._fullgraph:
                raise _core.InvalidArgumentError(f"compile: {reason}") from None
            self._warn(f"for these arguments: {reason}")
            return self._eager(args, kwargs)
        entry = self._plans.get(key)
        if entry is not None and not isinstance(entry, _Eager) and not entry.up_to_date():
            self._plans.clear()  # Module.to moved a tensor the plans read
            entry = None
        if entry is None:
            entry = self._build(key, tensors, skeleton, differentiates, trainable, params)
            if isinstance(entry, _Eager):  # warned only once eager ran: a model's own error raises as it is
                out = self._eager(args, kwargs)
                self._remember(key, entry)
                self._warn(f"for inputs {_describe(key)}: {entry.reason}")
                return out
        else:
            self._plans.move_to_end(key)
        if isinstance(entry, _Eager):
            return self._eager(args, kwargs)
        self._counts["plan_calls"] += 1
        if isinstance(entry, _core.plan.AutogradPlan):
            wrt = trainable + [t for t in tensors if t.requires_grad] if differentiates else []
            outputs = entry.run(tensors, wrt)
        else:
            outputs = entry.run(tensors)
        return self._rebuilders[key](iter(outputs))

    def _warn(self, why):
        if why not in self._warned:  # once per reason, as a graph break is reported once
            self._warned.add(why)
            warnings.warn(f"fg.compile: {type(self._orig_mod).__name__} runs eagerly {why}", UserWarning, stacklevel=4)

    def _eager(self, args, kwargs):
        self._counts["eager_calls"] += 1
        return self._orig_mod(*args, **kwargs)

    def _build(self, key, tensors, skeleton, differentiates, trainable, params):
        model = self._orig_mod
        buffers = [b for _, b in _named(model, "named_buffers")]
        # Fresh leaves over the caller's memory: the trace must not reach into the inputs' history.
        leaves = []
        for t in tensors:
            leaf = t.detach()
            leaves.append(leaf.requires_grad_(True) if differentiates and t.requires_grad else leaf)
        inputs = _core.plan.inputs_for_trace(leaves, params + buffers)
        names = list(_named(model, "named_parameters"))
        watch = params + buffers

        def forward(tracer):
            args, kwargs = _rebuild_arguments(skeleton, inputs)
            if not differentiates:
                with _no_grad():
                    return _flatten(model(*args, **kwargs), "compiled model"), (None, None)
            outputs, rebuild = _flatten(model(*args, **kwargs), "compiled model")
            wrt = trainable + [x for x in inputs if x.requires_grad]
            return (outputs, rebuild), _core.plan.trace_gradients(tracer, outputs, wrt)

        self._counts["traces"] += 1
        try:
            tracer, ((outputs, rebuild), (grad_outputs, grads)) = _Traced(
                model if hasattr(model, "named_modules") else None)(forward)
            if differentiates:
                entry = _core.plan.AutogradPlan(tracer, inputs, outputs, grad_outputs, grads, names, watch)
                _check_input_writes(entry.forward, "compile")
            else:
                entry = _core.plan.Plan(tracer, inputs, outputs, [], names, watch)
                _check_input_writes(entry, "compile")
        except Exception as e:  # the tracer refused the model: run it eagerly, as a graph break would
            if self._fullgraph:
                raise
            return _Eager(f"{type(e).__name__}: {e}")
        self._rebuilders[key] = rebuild
        self._remember(key, entry)
        return entry

    def _remember(self, key, entry):
        self._plans[key] = entry
        while len(self._plans) > self._max_plans:
            old, _ = self._plans.popitem(last=False)
            self._rebuilders.pop(old, None)


def _state(model):
    """(identity, training) of a model, compared per call: which tensor each parameter is and whether
    it requires grad; every module's training flag. One C++ walk for a Module."""
    if isinstance(model, _core.Module):
        return _core.plan.module_state(model)
    params = [p for _, p in _named(model, "named_parameters")]
    return (tuple((hash(p), p.requires_grad) for p in params),
            tuple(m.training for m in _named(model, "modules")))


def _describe(key):
    """A signature as the warning shows it: the tensors' shapes and dtypes, the grad mode."""
    _, tensors, differentiates, _ = key
    shapes = ", ".join(f"{tuple(s)} {str(d).rsplit('.', 1)[-1]}" for s, d, _, _ in tensors)
    return f"({shapes}){' under grad' if differentiates else ''}"
