"""Checkpoints in the safetensors format (reader and writer in C++), and fg.save / fg.load of any object.

fg.save / fg.load exchange plain tensor dicts with any safetensors tool; anything else (whole
modules, nested containers, numbers, strings, NumPy arrays) goes into flowgrad's pickle
container (flowgrad/_serialization.py). save_checkpoint keeps
a whole training state in one file: model tensors under "model.", optimizer state under
"optimizer.<param index>.<name>", and in the metadata the step, the RNG state, the optimizer's
param_groups, the scheduler's and the data loader's state, so that training resumes exactly.

Loading is all-or-nothing: load_checkpoint reads and checks every part first and assigns only
when all of them are sound; any fault in the file raises fg.CheckpointError.
"""
import io
import json
import os
import re
import tempfile

from . import _core
from . import _serialization
from .optim.lr_scheduler import _same_kind
from .nn._tied import missing_keys

__all__ = ["save", "load", "save_checkpoint", "load_checkpoint", "remap_keys"]

FORMAT = "flowgrad.checkpoint/1"


def _is_file(f):
    return hasattr(f, "write") or hasattr(f, "read")


def _safetensors_bytes(tensors, metadata):
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "tensors.safetensors")
        _core._save(tensors, path, metadata)
        with open(path, "rb") as file:
            return file.read()


def save(obj, f, metadata=None, *, pickle_protocol=4):
    """Writes `obj` to `f` (a path, or a binary file object such as io.BytesIO or an open file).

    A flat {name: tensor} dict (a state_dict) is written as safetensors, which any safetensors
    tool reads, with optional {str: str} metadata; to a path atomically. Anything else (a whole
    module, an optimizer's state_dict, nested dicts/lists/tuples of tensors, numbers, strings,
    NumPy arrays) is pickled into flowgrad's container: each tensor once, with its dtype, shape,
    requires_grad, parameter mark and device (views are stored as copies; ``.grad`` is not kept).
    Tensors on a device are read back to the host to be written."""
    if _serialization.is_tensor_dict(obj):
        if _is_file(f):
            f.write(_safetensors_bytes(dict(obj), metadata))
        else:
            _core._save(dict(obj), os.fspath(f), metadata)
        return
    if metadata is not None:
        raise _core.InvalidArgumentError("fg.save: metadata= is kept only with a {name: tensor} dict (safetensors), "
                                         f"not with {type(obj).__name__}")
    data = _serialization.dumps(obj, pickle_protocol)
    if _is_file(f):
        f.write(data)
        return
    path = os.fspath(f)
    scratch = f"{path}.tmp{os.getpid()}"
    try:
        with open(scratch, "wb") as file:
            file.write(data)
        os.replace(scratch, path)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        if isinstance(e, OSError) and os.path.exists(scratch):
            os.remove(scratch)
        raise _core.CheckpointError(f"fg.save: cannot create {path!r}: {e}") from e


def _read(f):
    """(the bytes to parse here or None for a safetensors path, a name for messages)."""
    if _is_file(f):
        return f.read(), repr(getattr(f, "name", type(f).__name__))
    path = os.fspath(f)
    try:
        with open(path, "rb") as file:
            head = file.read(len(_serialization.MAGIC))
            return head + file.read() if head == _serialization.MAGIC else head, f"'{path}'"
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None, f"'{path}'"  # the safetensors reader says why it cannot open it


def _safetensors_load(f, data):
    if not _is_file(f):  # data holds only the first bytes
        return _core._load(os.fspath(f))[0]
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "tensors.safetensors")
        with open(path, "wb") as file:
            file.write(data)
        return _core._load(path)[0]


def load(f, map_location=None, weights_only=None, *, device=None):
    """Reads what fg.save wrote (a path, or a binary file object): a safetensors file as a
    {name: tensor} dict in the file's data order, a pickled container as the saved object.

    map_location moves the tensors as PyTorch's does: a device or device string (every tensor
    there), a dict {saved location: new location} (others stay), or a callable
    ``fn(tensor_on_cpu, saved_location)`` returning the tensor to use (None: the saved location).
    ``device=`` is the earlier name of a device map_location. weights_only (default True, as in
    PyTorch 2.6 and later) loads tensors, dicts, lists, tuples, sets, numbers, strings, NumPy arrays
    and dtypes only, refusing any other class with fg.CheckpointError (also a
    pickle.UnpicklingError); pass weights_only=False for whole modules from a file you trust."""
    if device is not None:
        if map_location is not None:
            raise _core.InvalidArgumentError("fg.load: give map_location= or device=, not both")
        map_location = device
    data, name = _read(f)
    data = data or b""
    if data.startswith(_serialization.MAGIC):
        return _serialization.loads(data, map_location, True if weights_only is None else weights_only, name)
    if data.startswith(b"PK\x03\x04"):
        raise _core.CheckpointError(f"fg.load: {name} is a zip archive (PyTorch's torch.save format?); fg.load reads "
                                    "safetensors and what fg.save wrote (convert with safetensors.torch.save_file)")
    tensors = _safetensors_load(f, data)
    if map_location is None:
        return tensors
    return {k: _serialization.moved(t, map_location) for k, t in tensors.items()}


def _patterns(patterns, what):
    try:
        return [re.compile(p) for p in patterns]
    except (re.error, TypeError) as e:
        raise _core.InvalidArgumentError(f"remap_keys: {what} holds an invalid pattern: {e}") from e


def remap_keys(state, rules, transforms=None, drop=()):
    r"""A copy of a {name: tensor} state (``fg.load(path)``, a state_dict) with its names rewritten, for
    loading a checkpoint whose names differ from the model's (one trained with PyTorch):
    ``model.load_state_dict(fg.io.remap_keys(fg.load(path), rules, transforms, drop))``.

    rules: (pattern, replacement) pairs of Python regular expressions; every name goes through each
    pair in order (``re.sub``, so rules compose; a replacement may use groups, ``r"h\.(\d+)\."`` to
    ``r"blocks.\1."``); or a function from a name to its new name (None leaves the tensor out).
    drop: patterns; a tensor whose original name matches one in full is left out (buffers the model
    does not have, such as GPT-2's causal-mask ``attn.bias``).
    transforms: {pattern: function}; a tensor whose new name matches a pattern in full is replaced by
    function(tensor), the first matching pattern only; e.g. ``lambda w: w.t().contiguous()`` for the
    weights of GPT-2's Conv1D layers, stored (in, out) where Linear keeps (out, in).

    Raises fg.InvalidArgumentError when two names map to the same new name (naming both) or a pattern
    does not compile."""
    rename = rules if callable(rules) else None
    pairs = [] if rename else list(zip(_patterns([r[0] for r in rules], "rules"), [r[1] for r in rules]))
    dropped = _patterns(drop, "drop")
    changes = list(zip(_patterns(list(transforms or {}), "transforms"), (transforms or {}).values()))
    out, origin = {}, {}
    for name, tensor in state.items():
        if any(p.fullmatch(name) for p in dropped):
            continue
        new = name
        if rename:
            new = rename(name)
        else:
            for pattern, replacement in pairs:
                new = pattern.sub(replacement, new)
        if new is None:
            continue
        if new in out:
            raise _core.InvalidArgumentError(f"remap_keys: '{origin[new]}' and '{name}' both map to '{new}'")
        for pattern, fn in changes:
            if pattern.fullmatch(new):
                tensor = fn(tensor)
                break
        out[new], origin[new] = tensor, name
    return out


def _check_graph(graph, what):
    if graph is not None and not isinstance(graph, _core.Graph):
        raise _core.InvalidArgumentError(f"{what}: graph= takes an fg.Graph, got {type(graph).__name__}")


def _json(value, what):
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as e:
        raise _core.CheckpointError(f"save_checkpoint: the {what} state is not JSON data: {e}") from e


def save_checkpoint(path, model, optimizer=None, graph=None, step=None, metadata=None, *, scheduler=None,
                    loader=None):
    """Saves model tensors, optimizer state, the step counter and the RNG state to `path`;
    with graph=, also its trend histories, timing histories and recurrent state; with
    scheduler= and loader=, the schedule's position and the loader's epoch and position.

    Once fg.distributed is initialised, rank 0 writes and every rank returns after the file is
    complete (the ranks meet at a barrier), so all ranks can load_checkpoint it at once."""
    _check_graph(graph, "save_checkpoint")
    distributed = _core.distributed.is_initialized()
    if distributed and _core.distributed.rank() != 0:
        _core.distributed.barrier().wait()
        return
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "rng": json.dumps(list(_core.get_rng_state()))}
    if step is not None:
        meta["step"] = str(int(step))
    if optimizer is not None:
        sd = optimizer.state_dict()
        for index, entries in sd["state"].items():
            for name, t in entries.items():
                tensors[f"optimizer.{index}.{name}"] = t
        meta["optimizer"] = _json({"type": type(optimizer).__name__, "param_groups": sd["param_groups"]}, "optimizer")
    if graph is not None:
        meta["graph"] = json.dumps({"trends": graph._observation_state(), "timings": graph._timing_state()})
        for tag, t in graph._recurrent_state().items():
            tensors[f"graph.state.{tag}"] = t.detach()
    if scheduler is not None:
        meta["scheduler"] = _json({"type": type(scheduler).__name__, "state": scheduler.state_dict()}, "scheduler")
    if loader is not None:
        meta["loader"] = _json(loader.state_dict(), "loader")
    for key, value in (metadata or {}).items():
        if key in meta:
            raise _core.CheckpointError(f"save_checkpoint: metadata key '{key}' is reserved")
        meta[key] = value
    save(tensors, path, meta)
    if distributed:  # on an error instead, the uncaught exception ends the waiting ranks' job
        _core.distributed.barrier().wait()


# ---- loading: each _read_* checks one part without assigning anything and returns the
# function that assigns it; load_checkpoint calls those only after every part was read.

def _section(meta, name):
    if name not in meta:
        raise _core.CheckpointError(f"the file holds no {name} state")
    return json.loads(meta[name])


def _prefixed(tensors, prefix):
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _device_of(module):
    return next((p.device for p in module.parameters()), None)


def _read_model(model, tensors, meta):
    state = _prefixed(tensors, "model.")
    own = model.state_dict()
    missing, unexpected = missing_keys(model, own.keys(), state.keys()), sorted(state.keys() - own.keys())
    problems = ([f"missing keys {missing}"] if missing else []) + \
               ([f"unexpected keys {unexpected}"] if unexpected else []) + \
               [f"{k}: checkpoint {state[k].shape} vs model {t.shape}" for k, t in own.items()
                if k in state and state[k].shape != t.shape]
    if problems:
        raise _core.CheckpointError(f"the model state does not match {type(model).__name__}: {'; '.join(problems)}")
    state = {k: v.to(own[k].device) for k, v in state.items()}  # onto the model's device
    return lambda: model.load_state_dict(state)


def _state_layout(p, name):
    """(shape, dtype, device) of an optimizer state entry: Adam's step counter is an int64 scalar on
    the parameter's device (the update op advances it there); every other entry (moments, momentum
    buffers) is shaped like its parameter."""
    return ((), _core.int64, p.device) if name == "step" else (p.shape, p.dtype, p.device)


def _read_optimizer(optimizer, tensors, meta):
    saved = _section(meta, "optimizer")
    kind = type(optimizer).__name__
    if saved["type"] != kind:
        raise _core.CheckpointError(f"saved optimizer is {saved['type']}, not {kind}")
    groups, own = saved["param_groups"], optimizer.param_groups
    if len(groups) != len(own) or any(len(g["params"]) != len(o["params"]) for g, o in zip(groups, own)):
        raise _core.CheckpointError(f"the saved param groups ({[len(g['params']) for g in groups]} params) do not match "
                                    f"this {kind}'s ({[len(o['params']) for o in own]})")
    params, options = {}, []
    for g, o in zip(groups, own):
        unknown = set(g) - set(optimizer.defaults) - {"params"}
        if unknown:
            raise _core.CheckpointError(f"unknown {kind} options {sorted(unknown)}")
        mistyped = {k: v for k, v in g.items() if k != "params" and not _same_kind(v, optimizer.defaults[k])}
        if mistyped:
            raise _core.CheckpointError(f"{kind} options of the wrong kind: {mistyped!r:.200}")
        params.update((int(i), p) for i, p in zip(g["params"], o["params"]))
        opts = {k: tuple(v) if k == "betas" else v for k, v in g.items() if k != "params"}
        optimizer._validate({**o, **opts})
        options.append({**opts, "params": g["params"]})
    state = {}
    for key, t in _prefixed(tensors, "optimizer.").items():
        index, name = key.split(".", 1)
        p = params[int(index)]
        if name not in optimizer._state_keys:
            raise _core.CheckpointError(f"'optimizer.{key}' is no {kind} state (expected {optimizer._state_keys})")
        shape, dtype, device = _state_layout(p, name)
        if t.shape != shape or t.dtype != dtype:
            raise _core.CheckpointError(f"'optimizer.{key}' is {t.dtype} {t.shape}, expected {dtype} {shape}")
        state.setdefault(int(index), {})[name] = t.to(device)
    return lambda: optimizer.load_state_dict({"state": state, "param_groups": options})


def _checked_observation(state):
    """An observation history (trends or timings) whose every field the Graph can take."""
    def ints(v):
        return isinstance(v, list) and all(type(x) is int and -2**63 <= x < 2**63 for x in v)

    def numbers(v):
        return isinstance(v, list) and all(type(x) in (int, float) for x in v)

    series = state["series"]
    if not (isinstance(series, dict) and numbers(state["flush_seconds"]) and all(
            ints(s["epochs"]) and numbers(s["values"]) and len(s["epochs"]) == len(s["values"])
            for s in series.values())):
        raise _core.CheckpointError("a graph history is malformed (expected epochs and values of equal length)")
    return state


def _read_graph(graph, tensors, meta, device):
    saved = _section(meta, "graph")
    trends, timings = _checked_observation(saved["trends"]), _checked_observation(saved["timings"])
    recurrent = {tag: t.to(device) if device else t for tag, t in _prefixed(tensors, "graph.state.").items()}
    # Which tags are recurrent state is known only to the Graph: try them, then put back what was there.
    before = graph._recurrent_state()
    try:
        for tag, t in recurrent.items():
            graph._set_recurrent_state(tag, t)
    finally:
        graph.reset_state()
        for tag, t in before.items():
            graph._set_recurrent_state(tag, t)

    def assign():
        graph._restore_observation(trends)
        graph._restore_timings(timings)
        graph.reset_state()
        for tag, t in recurrent.items():
            graph._set_recurrent_state(tag, t)
    return assign


def _read_scheduler(scheduler, tensors, meta):
    saved = _section(meta, "scheduler")
    kind = type(scheduler).__name__
    if saved["type"] != kind:
        raise _core.CheckpointError(f"saved scheduler is {saved['type']}, not {kind}")
    state = scheduler._checked_state(saved["state"]) if hasattr(scheduler, "_checked_state") else saved["state"]
    return lambda: scheduler.load_state_dict(state)


def _read_loader(loader, tensors, meta):
    state = loader._checked_state(_section(meta, "loader"))
    return lambda: loader.load_state_dict(state)


def _read_rng(meta):
    rng = json.loads(meta["rng"])
    if not (isinstance(rng, list) and len(rng) == 2 and all(type(v) is int and 0 <= v < 2**64 for v in rng)):
        raise _core.CheckpointError(f"the RNG state {rng!r:.100} is not two 64-bit counters")
    return lambda: _core.set_rng_state(tuple(rng))


# Faults a corrupt file can raise while a part is read (json.JSONDecodeError is a ValueError).
_CORRUPT = (ArithmeticError, AttributeError, LookupError, TypeError, ValueError, _core.FlowgradError)


def load_checkpoint(path, model, optimizer=None, graph=None, scheduler=None, loader=None):
    """Restores what save_checkpoint wrote (model, optimizer, graph, scheduler, loader, RNG) onto
    the model's device and returns the metadata, with 'step' as an int when it was saved.
    All-or-nothing: every part is read and checked before any is assigned, and a fault raises
    fg.CheckpointError with the objects untouched."""
    _check_graph(graph, "load_checkpoint")
    tensors, meta = _core._load(os.fspath(path))
    if meta.get("format") != FORMAT:
        raise _core.CheckpointError(f"load_checkpoint: '{path}' is not a flowgrad checkpoint (format {meta.get('format')!r})")
    device = _device_of(model)
    readers = [("model", model, lambda: _read_model(model, tensors, meta)),
               ("optimizer", optimizer, lambda: _read_optimizer(optimizer, tensors, meta)),
               ("graph", graph, lambda: _read_graph(graph, tensors, meta, device)),
               ("scheduler", scheduler, lambda: _read_scheduler(scheduler, tensors, meta)),
               ("loader", loader, lambda: _read_loader(loader, tensors, meta)),
               ("RNG", meta, lambda: _read_rng(meta)),
               ("step", meta, lambda: int(meta["step"]) if "step" in meta else None)]
    results = {}
    for part, target, read in readers:
        if target is None:
            continue
        try:
            results[part] = read()
        except _CORRUPT as e:
            detail = str(e) if isinstance(e, _core.CheckpointError) else f"corrupt data ({type(e).__name__}: {e})"
            raise _core.CheckpointError(f"load_checkpoint: '{path}': {part}: {detail}") from e
    step = results.pop("step")
    for assign in results.values():
        assign()
    out = dict(meta)
    if step is not None:
        out["step"] = step
    return out
