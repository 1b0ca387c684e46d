"""fg.compile: a whole training step (forward, loss, backward, optimizer update) as one plan.
(``fg.compile(model)`` without example inputs compiles the model lazily instead, as torch.compile
does: _compiled_module.py.)

The step is traced once: every op it runs, forward and backward and the optimizer's update ops,
is recorded by the C++ tracer and becomes an instruction over planned memory (flowgrad._core.plan).
The trace computes nothing: values derived from the step's inputs or parameters are shape-only
tensors (no kernel runs, no bytes are allocated for them) and in-place writes (optimizer updates,
running statistics, gradient all-reduces) are recorded, not made; only constants made inside the
step (fills, aranges and what is computed from them only) run for real, so their values fold.
Compiling changes no parameter, state or RNG; the first call makes the first update.
Calling the step then runs that flat list of kernels: no Python, no op dispatch, no allocation
and no autograd bookkeeping per op. Python only composes here; the plan is built and run in C++.

What tracing means for you:
- The step is traced as the path it took: Python-side control flow in a model's forward is
  frozen at compile time. A host read of a computed value inside the step (``.item()``,
  ``float(t)``, ``.numpy()``) raises at compile time instead of freezing it, as does an op whose
  output shape depends on values (``nonzero``, ``x[x > 0]``). FlowBuilder ``switch`` and ``while_``/``until`` are
  data-dependent control flow the plan keeps: they compile to branch instructions decided at
  run time (a parameter only a branch trains is updated only when that branch ran).
- Parameters, gradients and optimizer state stay the model's and optimizer's own tensors,
  updated in place: eager use, ``state_dict`` and checkpoints see the trained values at once.
  Each parameter's ``.grad`` is bound to a tensor the step overwrites every call (no
  ``zero_grad`` needed: gradients are not accumulated across calls).
- Optimizer options (``lr`` from a scheduler, betas, weight decay) are read at every call. Before
  every call the step checks what it was traced with (parameters and ``requires_grad``, param
  groups, the optimizer's state and hyper-parameter tensors, recurrent FlowBuilder state) and
  traces again when that changed; ``.grad`` is bound again every call (``zero_grad`` is harmless).
- Random ops (dropout) draw fresh values every call, reproducible from ``fg.manual_seed``.
- The model is traced in the mode it is in (``train()``/``eval()``) at compile time.
- On CUDA the step is captured into one CUDA graph on its second call and replayed from then on
  (``step.stats["cuda_graph"]`` says so, or why not; ``FLOWGRAD_NO_CUDA_GRAPH=1`` turns it off).
"""
import collections
import contextlib
import inspect
import os
import sys
import time

from . import _core
from .autograd import grad as _grad

__all__ = ["compile", "CompiledStep", "ForwardPlan", "Explanation"]  # and CompiledModule (_compiled_module.py)


class _NotALoss(_core.InvalidArgumentError):
    """A step without loss_fn and optimizer returned something other than a one-element floating
    tensor: compile() makes it a forward plan instead."""


def _signature(inputs):
    return tuple((tuple(t.shape), str(t.dtype), str(t.device)) for t in inputs)


def _as_tensors(inputs, what):
    out = []
    for i, x in enumerate(inputs):
        if not isinstance(x, _core.Tensor):
            raise TypeError(f"{what}: input {i} must be a flowgrad Tensor, got {type(x).__name__}")
        out.append(x)
    return out


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _module_labels(model):
    """(module, label) pairs for explain(): dotted paths from `model`, a FlowBuilder node's path
    followed by its tag ("3[enc]", "3[enc].0")."""
    named = [(n, m) for n, m in _named(model, "named_modules")]
    labels = {id(m): n for n, m in named}
    for _, g in named:
        if not isinstance(g, _core.Graph):
            continue
        for tag in g.tags:
            if tag in g.input_names:  # a graph input is a tag of no module
                continue
            old = labels.get(id(g.sub(tag)))
            if old is None:
                continue
            new = f"{old}[{tag}]"
            for key, label in labels.items():
                if label == old or label.startswith(old + "."):
                    labels[key] = new + label[len(old):]
    return [(m, labels[id(m)]) for _, m in named]


class _Traced:
    """Traces `fn(tracer)` once on shape-only tensors (no kernel runs, no in-place write is made:
    parameters and state stay as they are); the RNG state is put back after the trace."""

    def __init__(self, model=None):
        self.model = model

    def __call__(self, fn):
        rng = _core.get_rng_state()
        tracer = _core.plan.Tracer()
        tracer.set_module_names(_module_labels(self.model))
        tracer.locate_sources(_PACKAGE)
        # The profile hook notes the caller's line before ops that release the interpreter; a
        # profiler already installed (cProfile) is left alone (lines then come from module calls).
        previous = sys.getprofile()
        try:
            with tracer:
                if previous is None:
                    sys.setprofile(tracer.profile)
                result = fn(tracer)
        finally:
            if previous is None:  # a cProfile profiler reads back as an object setprofile refuses
                sys.setprofile(None)
            _core.set_rng_state(rng)
        return tracer, result


class Explanation:
    """What a compiled plan does and where each instruction came from (``step.explain()``).

    ``rows``: one dict per instruction (instruction, op, phase, module, source, run, buffer, bytes,
    offset); ``passes``: (pass, instructions before, after) per pass of the plan's build;
    ``arena_bytes``: the arena's size. ``str()`` is a readable table."""

    def __init__(self, plan):
        self.rows = plan.explain()
        self.passes = plan.passes()
        self.arena_bytes = plan.stats()["arena_bytes"]

    def __str__(self):
        lines = ["passes: " + ", ".join(f"{name}: {a} -> {b}" for name, a, b in self.passes),
                 f"arena: {self.arena_bytes} bytes"]
        header = ("#", "phase", "op", "module", "source", "run", "bytes", "offset")
        table = [header] + [(str(r["instruction"]), r["phase"], r["op"], r["module"] or "-", r["source"] or "-",
                             "-" if r["run"] < 0 else str(r["run"]), str(r["bytes"]),
                             "-" if r["offset"] is None else str(r["offset"])) for r in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
        return "\n".join(lines)

    def __repr__(self):
        return f"<Explanation of {len(self.rows)} instructions>"


class _PlanViews:
    """The ways to look at a plan, shared by compiled steps and forward plans."""

    @property
    def plan(self):
        """The plan (flowgrad._core.plan.Plan); for a compiled step, the one its last call ran (the
        example inputs' until the first call)."""
        return self._plan

    @property
    def stats(self):
        """instructions, kernels, fused, arena_bytes, naive_bytes, cuda_graph (and pass counts)."""
        return self._plan.stats()

    def ir(self):
        """The plan's instructions as a list of records (op, inputs, outputs, shape, dtype, attrs)."""
        return self._plan.ir()

    def dot(self):
        """The plan as a Graphviz DOT graph (instructions as nodes, data flow as edges)."""
        return self._plan.dot()

    def explain(self):
        """Every instruction with its phase (forward, backward, optimizer), the module path or
        FlowBuilder tag and the source line it came from, its arena bytes and offset, and what each
        pass did (an :class:`Explanation`; ``print`` it for a table)."""
        return Explanation(self._plan)

    def __str__(self):
        """The plan's instructions, then the explain() table."""
        return f"{self._plan}\n{self.explain()}"


class _PlanCache:
    """The plans of a dynamic step by input signature, at most `max_plans` (the least recently used
    is dropped). Plans never run at the same time, so those on one device share one arena: the
    largest plan's, which the others are rebound onto (it never shrinks when a plan is dropped)."""

    def __init__(self, max_plans):
        self.max_plans = max_plans
        self.entries = collections.OrderedDict()  # signature -> {"plan", "bucket", "hits", "grads"}
        self.arenas = {}  # device -> the shared arena (a uint8 tensor)

    def __len__(self):
        return len(self.entries)

    def get(self, signature):
        entry = self.entries.get(signature)
        if entry is not None:
            self.entries.move_to_end(signature)
            entry["hits"] += 1
        return entry

    def add(self, signature, plan, bucket, grads):
        self.entries[signature] = {"plan": plan, "bucket": bucket, "hits": 0, "grads": grads}
        while len(self.entries) > self.max_plans:
            self.entries.popitem(last=False)
        arena = self.arenas.get(plan.device)
        if arena is None or arena.numel() < plan.stats()["arena_bytes"]:
            arena = self.arenas[plan.device] = plan.arena()
            for entry in self.entries.values():
                if entry["plan"] is not plan and entry["plan"].device == plan.device:
                    entry["plan"].bind_arena(arena)
        else:
            plan.bind_arena(arena)

    def grads(self):
        """{hash(parameter): the gradient tensor the cached plans write} (hash is the tensor's identity)."""
        return {hash(p): g for entry in self.entries.values() for p, g in entry["grads"]}

    def newest(self):
        return next(reversed(self.entries))

    def clear(self):
        self.entries.clear()
        self.arenas.clear()

    def rows(self):
        """One record per cached plan, least recently used first."""
        return [{"signature": signature, "bucket": e["bucket"], "arena_bytes": e["plan"].stats()["arena_bytes"],
                 "hits": e["hits"]} for signature, e in self.entries.items()]

    def arena_bytes(self):
        """Bytes of the distinct arenas the cached plans use."""
        arenas = {a.data_ptr(): a.numel() for a in (e["plan"].arena() for e in self.entries.values())}
        return sum(arenas.values())


class _Buckets:
    """Pads a step's inputs up to a bucket of one dimension (``compile(buckets=...)``)."""

    def __init__(self, sizes, dim, pad_values, count):
        sizes = list(sizes)
        if not sizes or any(not isinstance(b, int) or b < 1 for b in sizes) or sorted(set(sizes)) != sizes:
            raise _core.InvalidArgumentError(
                f"compile: buckets must be increasing positive integers (e.g. [128, 256, 512]), got {sizes}")
        if not isinstance(dim, int) or dim < 0:
            raise _core.InvalidArgumentError(f"compile: bucket_dim must be a non-negative integer, got {dim!r}")
        pad_values = list(pad_values) if pad_values is not None else [None] * count
        if len(pad_values) != count:
            raise _core.InvalidArgumentError(
                f"compile: pad_values needs one entry (a number or None) per step input: {count}, got {len(pad_values)}")
        self.sizes, self.dim, self.pad_values = sizes, dim, pad_values

    def pad(self, inputs):
        """(inputs padded to their bucket, the size before padding, the bucket); inputs without
        `dim` are left as they are."""
        sized = [i for i, x in enumerate(inputs) if x.ndim > self.dim]
        if not sized:
            return inputs, None, None
        length = max(inputs[i].shape[self.dim] for i in sized)
        bucket = next((b for b in self.sizes if b >= length), None)
        longest = max(sized, key=lambda i: inputs[i].shape[self.dim])
        if bucket is None:
            raise _core.ShapeError(
                f"compiled step: input {longest} has shape {tuple(inputs[longest].shape)}: dim {self.dim} of size "
                f"{length} is larger than the largest of buckets {self.sizes}")
        out = list(inputs)
        for i in sized:
            x, value = inputs[i], self.pad_values[i]
            missing = bucket - x.shape[self.dim]
            if missing == 0:
                continue
            if value is None:
                raise _core.ShapeError(
                    f"compiled step: input {i} has shape {tuple(x.shape)}: dim {self.dim} must be padded up to "
                    f"bucket {bucket} of buckets {self.sizes}, but input {i} has no pad value (pad_values)")
            with _no_grad():
                out[i] = _core.pad(x, (0, 0) * (x.ndim - 1 - self.dim) + (0, missing), value)
        return out, length, bucket

    def bucket_of(self, inputs):
        """The size of `dim` of padded inputs (None when none has it)."""
        return max((x.shape[self.dim] for x in inputs if x.ndim > self.dim), default=None)

    def unpad(self, value, length, bucket):
        """An output with the padded dimension, sliced back to the unpadded size."""
        if length is None or length == bucket or value.ndim <= self.dim or value.shape[self.dim] != bucket:
            return value
        return value.narrow(self.dim, 0, length)


class CompiledStep(_PlanViews):
    """A compiled training step: ``loss = step(*inputs)``. Made by :func:`compile`.

    ``step.forward_only`` is True when there is nothing to train (no parameter requires grad):
    the plan then computes the loss only. ``step.compile_seconds`` says where the last build's
    time went: ``{"trace": s, "plan": s}`` (``step.plan.pass_ms()`` splits the plan's part)."""

    def __init__(self, model, loss_fn, optimizer, example_inputs, dynamic, buckets=None, bucket_dim=1,
                 pad_values=None, max_plans=8):
        self.model, self.loss_fn, self.optimizer, self.dynamic = model, loss_fn, optimizer, dynamic
        inputs = _as_tensors(example_inputs, "compile")
        if not isinstance(max_plans, int) or max_plans < 1:
            raise _core.InvalidArgumentError(f"compile: max_plans must be a positive integer, got {max_plans!r}")
        self._buckets = None
        if buckets is not None:
            if not dynamic:
                raise _core.InvalidArgumentError("compile: buckets need dynamic=True (one plan per bucket)")
            self._buckets = _Buckets(buckets, bucket_dim, pad_values, len(inputs))
            if max_plans < len(self._buckets.sizes):
                raise _core.InvalidArgumentError(
                    f"compile: max_plans={max_plans} cannot keep a plan for each of buckets {self._buckets.sizes}")
        self._plans = _PlanCache(max_plans if dynamic else 1)
        self._traces = 0
        self._plan = self._build(self._padded(inputs)[0])

    def _padded(self, inputs):
        return self._buckets.pad(inputs) if self._buckets is not None else (inputs, None, None)

    def _build(self, inputs):
        if self.optimizer is not None:
            self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        else:
            self._params = [p for _, p in _named(self.model, "named_parameters") if p.requires_grad]
        # Nothing to train (a frozen model, a function without parameters): a forward-only plan
        # that computes the loss and nothing else (no backward, no update, .grad left alone).
        self.forward_only = not any(p.requires_grad for p in self._params)
        opt = self.optimizer if not self.forward_only else None
        # Creates missing state and the hyper-parameter tensors (read in place) before the trace.
        state, state_names = opt.plan_state() if opt is not None else ([], [])
        buffers = [b for _, b in _named(self.model, "named_buffers")]
        # Views and memory shared with the model are traced as copies of their own (plan.h).
        held = self._params + [p for _, p in _named(self.model, "named_parameters")] + state + buffers
        inputs = _core.plan.inputs_for_trace(inputs, held)
        model_inputs, targets = (inputs[:-1], inputs[-1:]) if self.loss_fn is not None else (inputs, [])

        def step(tracer):
            if self.forward_only:
                with _no_grad():
                    out = loss_of(), []
            else:
                with _gradient_sync(self.model) as average:
                    out = traced_step(tracer, average)
            self._states.carry()
            return out

        def loss_of():
            out = self.model(*model_inputs)
            loss = self.loss_fn(out, *targets) if self.loss_fn is not None else out
            if not isinstance(loss, _core.Tensor) or loss.numel() != 1 or not loss.dtype.is_floating_point:
                raise _NotALoss(
                    "compile: the step must produce a one-element loss tensor "
                    f"(got {type(loss).__name__}{'' if not isinstance(loss, _core.Tensor) else ' of shape ' + str(loss.shape)})")
            return loss

        def traced_step(tracer, average):
            loss = loss_of()
            tracer.mark_backward()
            # Contiguous gradients: the optimizer reads them as they are and .grad is bound to them.
            # A frozen parameter (requires_grad False) of the optimizer's groups gets None.
            trainable = iter(_grad([loss], [p for p in self._params if p.requires_grad], allow_unused=True))
            grads = [next(trainable) if p.requires_grad else None for p in self._params]
            grads = [g if g is None else g.contiguous() for g in grads]
            grads = average(self._params, grads)
            if opt is not None:
                tracer.mark_update()
                scoped = "scope" in inspect.signature(opt.traced_step).parameters  # an optimizer of one's own may not
                opt.traced_step(grads, foreach=False if tracer.branches else None,
                                **({"scope": lambda: _update_scope(tracer)} if scoped else {}))
            return loss, grads

        start = time.perf_counter()
        self._states = _RecurrentState(self.model)
        tracer, (loss, grads) = _Traced(self.model)(step)
        if self._states.found():  # traced again, reading state tensors of its own (shapes from the first trace)
            tracer, (loss, grads) = _Traced(self.model)(step)
        self._states.restore()
        traced = time.perf_counter()
        pairs = [(p, g) for p, g in zip(self._params, grads) if g is not None]
        names = list(_named(self.model, "named_parameters")) + state_names
        self._tagged = _tagged_values(self.model)
        outputs = [loss] + [value for _, _, value in self._tagged]
        self._traces += 1
        shared = self._plans.grads()  # the other plans' gradient tensors: one set for all of them
        plan = _core.plan.Plan(tracer, inputs, outputs, pairs, names, self._params + state + buffers,
                               [shared.get(hash(p)) for p, _ in pairs])
        # Where the last build's time went (seconds): tracing the step, building the plan.
        self.compile_seconds = {"trace": traced - start, "plan": time.perf_counter() - traced}
        bucket = self._buckets.bucket_of(inputs) if self._buckets is not None else None
        self._plans.add(_signature(inputs), plan, bucket, [(p, p.grad) for p, _ in pairs])
        self._traced_identity = self._identity()
        return plan

    def _identity(self):
        """What the plans were traced with, checked before every call (hash is the tensor's
        identity): which tensors are the model's parameters now and which of them train; the
        optimizer's param groups, state and hyper-parameter tensors (a new group, a loaded state
        or a new state layout); the FlowBuilder graphs' recurrent state tensors (reset_state,
        set_state); whether a data-parallel wrapper averages gradients now (False inside
        ``ddp.no_sync()``)."""
        params = tuple((hash(p), p.requires_grad) for _, p in _named(self.model, "named_parameters"))
        optimizer = None
        if self.optimizer is not None:
            identity = getattr(self.optimizer, "plan_identity", None)  # optional for an optimizer of one's own
            optimizer = identity() if identity is not None else tuple(
                tuple((hash(p), p.requires_grad) for p in g["params"]) for g in self.optimizer.param_groups)
        return params, optimizer, self._states.identity(), getattr(self.model, "syncs_gradients", None)

    @property
    def stats(self):
        """The last call's plan's counts (instructions, kernels, arena_bytes, inputs_copied: the
        inputs it copied into its arena, where a CPU plan reads the others in place, ...), and ``plans``: one record per
        cached plan (signature, bucket, arena_bytes, hits), least recently used first, and
        ``arena_total_bytes``: the bytes of the arenas they use (shared: plans on one device
        share the largest one's), and ``traces``: how many times the step was traced (a dropped
        plan whose shape comes back is traced again)."""
        out = self._plan.stats()
        out["traces"] = self._traces
        out["plans"] = self._plans.rows()
        out["arena_total_bytes"] = self._plans.arena_bytes()
        return out

    def _plan_for(self, inputs):
        """The plan for these (padded) inputs, traced when none is cached (at most max_plans).
        Every cached plan is dropped when what they were traced with changed (``_identity``), or
        when Module.to moved a tensor one of them reads."""
        if self._identity() != self._traced_identity or not all(e["plan"].up_to_date() for e in self._plans.entries.values()):
            self._plans.clear()
        entry = self._plans.get(_signature(inputs) if self.dynamic else self._plans.newest()) if len(self._plans) else None
        if entry is None:
            plan = self._build(inputs)
        else:
            plan = entry["plan"]
            # .grad shows the tensors this plan writes (shared unless unfit), also after a zero_grad()
            for p, g in entry["grads"]:
                p.grad = g
        self._plan = plan
        return plan

    def __call__(self, *inputs):
        """Runs one whole training step; returns the loss (a 0-d tensor on the plan's device)."""
        return self._step(inputs, None)

    def profile(self, *inputs):
        """Runs one whole training step (it trains, like a call) and returns where its time went:
        a list of {"instruction", "op", "ms"} records, one per plan instruction. On CUDA the times
        come from timing events recorded inside a captured graph of the step; on the CPU from the
        host clock around each instruction (a fused run counts at its first instruction)."""
        timings = []
        self._step(inputs, timings)
        ops = [r["op"] for r in self._plan.ir()]
        return [{"instruction": i, "op": op, "ms": ms} for i, (op, ms) in enumerate(zip(ops, timings))]

    def _step(self, inputs, timings):
        inputs, length, bucket = self._padded(_as_tensors(inputs, "compiled step"))
        plan = self._plan_for(inputs)

        def run():
            if timings is None:
                return plan.run(inputs)
            outputs, ms = plan.run_profiled(inputs)
            timings.extend(ms)
            return outputs

        updates = self.optimizer is not None and not self.forward_only
        loss, *tagged = self.optimizer.run_compiled(run) if updates else run()
        for (graph, tag, _), value in zip(self._tagged, tagged):
            graph.set_tagged(tag, self._buckets.unpad(value, length, bucket) if self._buckets else value)
        return loss

    def forward_plan(self, *example_inputs):
        """A forward-only plan (e.g. batch 1 for inference) reading the same parameter buffers."""
        return ForwardPlan(self.model, example_inputs)

    def __repr__(self):
        s = self.stats
        return (f"<CompiledStep {s['instructions']} instructions on {self._plan.device}, "
                f"arena {s['arena_bytes']} bytes (naive {s['naive_bytes']})>")


class ForwardPlan(_PlanViews):
    """A compiled forward pass (no gradients): ``outputs = plan(*inputs)``. Made by
    :func:`compile` without an optimizer for a step that does not return a loss, and by
    ``step.forward_plan``.

    `model` is a Module or any function of the inputs; it may return a tensor or tuples, lists and
    dicts of tensors, and each call returns fresh tensors in the same structure. Parameters,
    buffers and any other tensor made before compiling (a tensor the function closes over) are read
    in place, so training is visible to the plan at once; what the step writes into them in place
    (``index_copy_``, ``scatter_``, ``copy_``, ``add_``: a KV cache held as a module buffer, a
    position counter) is written into them on every call and persists across calls. The inputs
    are values: a step that writes an input in place raises fg.InvalidArgumentError at compile
    time (the write could not reach the caller's tensor). Random ops draw fresh values every
    call, continuing the global generator's stream (``fg.manual_seed``). Shapes are those of the
    example inputs: others raise ``fg.ShapeError``. ``plan.compile_seconds``: {"trace", "plan"}."""

    def __init__(self, model, example_inputs):
        self.model = model
        params = [p for _, p in _named(model, "named_parameters")]
        buffers = [b for _, b in _named(model, "named_buffers")]
        inputs = _core.plan.inputs_for_trace(_as_tensors(example_inputs, "forward_plan"), params + buffers)

        def forward(tracer):
            with _no_grad():
                return _flatten(model(*inputs), "forward_plan")

        start = time.perf_counter()
        tracer, (outputs, self._rebuild) = _Traced(model if hasattr(model, "named_modules") else None)(forward)
        traced = time.perf_counter()
        names = list(_named(model, "named_parameters"))
        self._plan = _core.plan.Plan(tracer, inputs, outputs, [], names, params + buffers)
        self.compile_seconds = {"trace": traced - start, "plan": time.perf_counter() - traced}
        _check_input_writes(self._plan, "compile")

    def __call__(self, *inputs):
        """The step's outputs for these inputs (same shapes as the example inputs), as fresh tensors
        in the structure the step returned."""
        return self._rebuild(iter(self._plan.run(_as_tensors(inputs, "forward plan"))))

    def memory(self):
        """Bytes this plan holds per device before it runs: ``{device: {"weights", "buffers",
        "arena", "total"}}`` (weights: the model's parameters; buffers: its buffers, a KV cache;
        arena: the plan's intermediates, planned once)."""
        out = {}

        def add(device, key, n):
            row = out.setdefault(str(device), {"weights": 0, "buffers": 0, "arena": 0, "total": 0})
            row[key] += n
            row["total"] += n

        seen = set()
        for key, what in (("weights", "named_parameters"), ("buffers", "named_buffers")):
            for _, t in _named(self.model, what):
                if hash(t) not in seen:
                    seen.add(hash(t))
                    add(t.device, key, t.numel() * t.dtype.itemsize)
        add(self._plan.device, "arena", self._plan.stats()["arena_bytes"])
        return out

    def __repr__(self):
        s = self._plan.stats()
        return f"<ForwardPlan {s['instructions']} instructions on {self._plan.device}, arena {s['arena_bytes']} bytes>"


def _check_input_writes(plan, what):
    """Raises when the plan writes one of its inputs in place: the write would not reach the caller."""
    for record in plan.ir():
        written = [int(n[1:]) for n in record["outputs"] if n[:1] == "x" and n[1:].isdigit()]
        if written:
            raise _core.InvalidArgumentError(
                f"{what}: the step writes input {written[0]} in place ('{record['op']}'); a plan's inputs are "
                "values, so the write would not reach the caller's tensor. Hold such state in a module buffer "
                "(register_buffer) or a tensor made before compiling, which the plan writes in place")


def _flatten(result, what):
    """(the tensors of a step's result in order, a function rebuilding the result from an iterator
    over tensors): tensors, tuples, lists and dicts of them, nested."""
    tensors = []

    def walk(x, where):
        if isinstance(x, _core.Tensor):
            tensors.append(x)
            return lambda it: next(it)
        if isinstance(x, dict):
            parts = [(k, walk(v, f"{where}[{k!r}]")) for k, v in x.items()]
            return lambda it: type(x)((k, part(it)) for k, part in parts)
        if isinstance(x, (tuple, list)):
            parts = [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]
            if hasattr(x, "_fields"):  # a named tuple (fg.return_types, collections.namedtuple)
                return lambda it: type(x)(*(part(it) for part in parts))
            return lambda it: type(x)(part(it) for part in parts)
        raise TypeError(f"{what}: output{where} is a {type(x).__name__}, not a Tensor (a step returns tensors, "
                        "or tuples, lists and dicts of them)")

    rebuild = walk(result, "")
    if not tensors:
        raise _core.InvalidArgumentError(f"{what}: the step returned no tensor")
    return tensors, rebuild


@contextlib.contextmanager
def _update_scope(tracer):
    """One parameter's update ops, which a plan guards as one (Optimizer.traced_step)."""
    tracer.begin_update_scope()
    try:
        yield
    finally:
        tracer.end_update_scope()


class _RecurrentState:
    """The recurrent state of the model's FlowBuilder graphs (a ``using`` of a later tag) in a
    compiled step: a tensor of its own per state tag, which the plan reads where eager code reads
    the state and overwrites with the tagged value at the end of every call, as an eager loop
    that calls ``detach_state()`` after each step. It starts from the graph's state when that has
    the traced shape, else from zeros (as eager's first call)."""

    def __init__(self, model):
        self.graphs = _graphs(model)
        self.before = [g._recurrent_state() for g in self.graphs]
        self.tensors = []  # (graph, tag, state tensor)

    def identity(self):
        """Which tensors the graphs hold as state now (reset_state, set_state or an eager call change it)."""
        return tuple(hash(t) for g in self.graphs for t in g._recurrent_state().values())

    def found(self):
        """After a first trace: whether a graph has state; if so, makes the tensors for the next."""
        for g, before in zip(self.graphs, self.before):
            for tag in g._recurrent_state():
                traced, old = g.tagged(tag), before.get(tag)
                fits = old is not None and (old.shape, old.dtype, old.device) == (traced.shape, traced.dtype, traced.device)
                with _no_grad():
                    state = old.detach() if fits else _core.zeros(*traced.shape, dtype=traced.dtype, device=traced.device)
                self.tensors.append((g, tag, state))
        self.restore()
        return bool(self.tensors)

    def carry(self):
        """Inside the trace, at the end of the step: the tagged values become the next call's state."""
        with _no_grad():
            for g, tag, state in self.tensors:
                state.copy_(g.tagged(tag))

    def restore(self):
        """The graphs' state as the plan reads it (the trace left its traced values there)."""
        for g, before in zip(self.graphs, self.before):
            for tag, value in before.items():
                g._set_recurrent_state(tag, value)
        for g, tag, state in self.tensors:
            g._set_recurrent_state(tag, state)


def _graphs(model):
    """The FlowBuilder graphs in the model, each once."""
    out = []
    for module in [model] + list(_named(model, "modules")):
        if isinstance(module, _core.Graph) and all(module is not g for g in out):
            out.append(module)
    return out


def _tagged_values(model):
    """(graph, tag, traced value) for every tag of every FlowBuilder graph in the model."""
    out = []
    for module in [model] + list(_named(model, "modules")):
        if isinstance(module, _core.Graph) and all(module is not g for g, _, _ in out):
            out += [(module, tag, module.tagged(tag)) for tag in module.tags]
    return out


def _named(model, what):
    """model.named_parameters() / named_buffers() / modules(), or nothing for a plain function."""
    get = getattr(model, what, None)
    return get() if get is not None else []


def _gradient_sync(model):
    """A block that yields `average(params, grads)`: DistributedDataParallel's gradient all-reduce
    as traced ops; the gradients as they are for other models."""
    sync = getattr(model, "traced_sync", None)
    return sync() if sync is not None else contextlib.nullcontext(lambda params, grads: grads)


def _no_grad():
    from ._grad_mode import no_grad
    return no_grad()


_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_BACKENDS = (None, "inductor", "flowgrad", "eager")


def compile(model=None, loss_fn=None, optimizer=None, example_inputs=(), dynamic=None, buckets=None, bucket_dim=1,
            pad_values=None, max_plans=8, *, fullgraph=False, mode=None, backend=None, options=None, disable=False,
            **unknown):
    """Compiles `model`: lazily as PyTorch's ``torch.compile(model)`` does, or a training step of it
    into one plan when given example inputs.

    ``fg.compile(model)`` (a Module or a function; no `loss_fn`, `optimizer` or `example_inputs`)
    returns a :class:`CompiledModule`: call it as the model. It traces at its first call for each
    input signature (shapes, dtypes, devices, requires_grad, grad mode, training flags; at most
    `max_plans` kept): under ``fg.no_grad()``/``fg.inference_mode()`` a forward plan, under grad
    a forward plan and a backward plan that ``loss.backward()`` runs as one autograd node, so an
    eager loop with any optimizer runs on plans unchanged. A model the tracer refuses (``.item()`` of
    a computed value, a data-dependent shape) runs eagerly after a warning naming the reason.
    PyTorch's keywords: ``fullgraph=True`` raises instead of falling back; ``dynamic`` (None,
    True, False) is accepted: plans are always per input signature (static shapes), as
    ``dynamic=False`` compiles in PyTorch; ``mode`` is one of PyTorch's modes ("default",
    "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"), which build the same plans
    here (CUDA plans are captured into CUDA graphs in every mode; nothing is autotuned);
    ``backend`` "inductor" or "flowgrad" compiles, "eager" and ``disable=True`` return `model`
    itself; ``options`` must be empty. ``fg.compile(**keywords)`` without a model returns a
    decorator. Other keywords and values raise.

    A training step (with `example_inputs`):

    With `loss_fn`, the last example input is the target: ``loss = loss_fn(model(*inputs[:-1]),
    inputs[-1])``; without it, ``model(*inputs)`` must return the loss. With `optimizer`, each
    call also updates the parameters (its param groups decide which); without it, each call
    writes the gradients into ``.grad`` only. With no trainable parameter (a frozen model, a
    module without parameters or a plain function of the inputs), the plan is forward-only: it
    returns the loss and trains nothing.

    Shapes: without `dynamic` other input shapes raise ``fg.ShapeError``. With ``dynamic=True``
    one plan is kept per input signature (shapes, dtypes, devices), at most `max_plans` of them
    (the least recently used is dropped and traced again when its shape comes back); the plans
    share one arena, the largest one's. With `buckets` (increasing sizes, e.g. ``[128, 256,
    512]``; needs ``dynamic=True``) dimension `bucket_dim` (default 1, e.g. the sequence of
    (B, T) tokens) of every input that has it is padded up to the smallest bucket that holds the
    longest of them, so one plan per bucket serves every length. `pad_values` gives one value
    per step input (None: never padded), e.g. ``(0, -100)`` for tokens and the targets of a
    ``cross_entropy(..., ignore_index=-100)``; padding is right for models where positions past
    the end do not change the ones before (causal attention, per-position layers, a loss that
    ignores the pad). An input longer than the largest bucket, or shorter than its bucket
    without a pad value, raises ``fg.ShapeError`` naming the buckets and its shape. Tagged
    FlowBuilder values with the padded dimension are sliced back to the unpadded size.
    ``step.stats["plans"]`` lists the cached plans, ``step.stats["traces"]`` counts the traces.

    Forward plans: without `loss_fn` and `optimizer`, a `model` (a Module or any function) that
    returns anything but a one-element floating tensor (logits, sampled tokens, tuples, lists and
    dicts of tensors) compiles to a
    :class:`ForwardPlan`: ``outputs = plan(*inputs)`` in the structure the step returned, no
    gradients, and in-place writes into buffers and other tensors made before compiling (a KV
    cache) made on every call and kept across calls. ``plan.memory()`` reports its bytes.
    """
    if unknown:
        raise TypeError(f"compile: unknown keyword argument(s) {', '.join(sorted(unknown))}; fg.compile takes "
                        "loss_fn, optimizer, example_inputs, dynamic, buckets, bucket_dim, pad_values, max_plans and "
                        "PyTorch's fullgraph, mode, backend, options, disable")
    if mode not in _MODES:
        raise _core.InvalidArgumentError(f"compile: mode must be one of {_MODES[1:]} (PyTorch's modes), got {mode!r}")
    if backend not in _BACKENDS:
        raise _core.InvalidArgumentError(
            f"compile: backend must be 'inductor' or 'flowgrad' (plans) or 'eager' (no compilation), got {backend!r}")
    if options:
        raise _core.InvalidArgumentError(
            f"compile: options {sorted(options)} are PyTorch Inductor settings; flowgrad plans take none")
    if dynamic not in (None, True, False):
        raise _core.InvalidArgumentError(f"compile: dynamic must be None, True or False, got {dynamic!r}")
    if model is None:  # @fg.compile(fullgraph=True) and friends: a decorator
        return lambda fn: compile(fn, loss_fn, optimizer, example_inputs, dynamic, buckets, bucket_dim, pad_values,
                                  max_plans, fullgraph=fullgraph, mode=mode, backend=backend, disable=disable)
    if disable or backend == "eager":
        return model
    if not example_inputs:
        if loss_fn is not None or optimizer is not None or buckets is not None:
            raise _core.InvalidArgumentError(
                "compile: loss_fn, optimizer and buckets compile a training step and need example_inputs holding "
                "the step's inputs (e.g. (xb, yb)); fg.compile(model) alone compiles the model lazily")
        from ._compiled_module import CompiledModule
        return CompiledModule(model, fullgraph, max_plans)
    dynamic = bool(dynamic)
    try:
        return CompiledStep(model, loss_fn, optimizer, tuple(example_inputs), dynamic, buckets, bucket_dim,
                            pad_values, max_plans)
    except _NotALoss:
        if loss_fn is not None or optimizer is not None:
            raise
    return _forward_plan(model, example_inputs, dynamic, buckets)


def _forward_plan(model, example_inputs, dynamic, buckets):
    if dynamic or buckets is not None:
        raise _core.InvalidArgumentError(
            "compile: dynamic=True and buckets apply to training steps; a forward plan (no loss_fn, no optimizer, "
            "a step that returns other than a one-element floating loss) has the example inputs' shapes")
    return ForwardPlan(model, tuple(example_inputs))
