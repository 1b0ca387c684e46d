"""Checkpoints in the safetensors format (reader and writer in C++).

fg.save / fg.load exchange plain tensor dicts with any safetensors tool. save_checkpoint keeps
a whole training state in one file: model tensors under "model.", optimizer state under
"optimizer.<param index>.<name>", and in the metadata the step, the RNG state and the
optimizer's param_groups, so that training resumes exactly.
"""
import json
import os

from . import _core

__all__ = ["save", "load", "save_checkpoint", "load_checkpoint"]

FORMAT = "flowgrad.checkpoint/1"


def save(tensors, path, metadata=None):
    """Writes a {name: tensor} dict (and {str: str} metadata) to `path` atomically."""
    _core._save(dict(tensors), os.fspath(path), metadata)


def load(path, device=None):
    """Reads a safetensors file into a {name: tensor} dict (in the file's data order)."""
    tensors, _ = _core._load(os.fspath(path))
    if device is not None:
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors


def _check_graph(graph, what):
    if graph is not None and not isinstance(graph, _core.Graph):
        raise _core.InvalidArgumentError(f"{what}: graph= takes an fg.Graph, got {type(graph).__name__}")


def save_checkpoint(path, model, optimizer=None, graph=None, step=None, metadata=None):
    """Saves model tensors, optimizer state, the step counter and the RNG state to `path`;
    with graph=, also its trend histories, timing histories and recurrent state.

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
        meta["optimizer"] = json.dumps({"type": type(optimizer).__name__, "param_groups": sd["param_groups"]})
    if graph is not None:
        meta["graph"] = json.dumps({"trends": graph._observation_state(), "timings": graph._timing_state()})
        for tag, t in graph._recurrent_state().items():
            tensors[f"graph.state.{tag}"] = t.detach()
    for key, value in (metadata or {}).items():
        if key in meta:
            raise _core.CheckpointError(f"save_checkpoint: metadata key '{key}' is reserved")
        meta[key] = value
    save(tensors, path, meta)
    if distributed:  # on an error instead, the uncaught exception ends the waiting ranks' job
        _core.distributed.barrier().wait()


def load_checkpoint(path, model, optimizer=None, graph=None):
    """Restores what save_checkpoint wrote (model, optimizer, RNG) and returns the metadata,
    with 'step' as an int when it was saved. With graph=, trends continue where they were."""
    _check_graph(graph, "load_checkpoint")
    tensors, meta = _core._load(os.fspath(path))
    if meta.get("format") != FORMAT:
        raise _core.CheckpointError(f"load_checkpoint: '{path}' is not a flowgrad checkpoint (format {meta.get('format')!r})")
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    if optimizer is not None:
        if "optimizer" not in meta:
            raise _core.CheckpointError(f"load_checkpoint: '{path}' holds no optimizer state")
        saved = json.loads(meta["optimizer"])
        if saved["type"] != type(optimizer).__name__:
            raise _core.CheckpointError(f"load_checkpoint: saved optimizer is {saved['type']}, not {type(optimizer).__name__}")
        state = {}
        for key, t in tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = t
        for group in saved["param_groups"]:
            if "betas" in group:
                group["betas"] = tuple(group["betas"])
        optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})
    if graph is not None:
        if "graph" not in meta:
            raise _core.CheckpointError(f"load_checkpoint: '{path}' holds no graph observation state")
        saved = json.loads(meta["graph"])
        graph._restore_observation(saved["trends"])
        graph._restore_timings(saved["timings"])
        graph.reset_state()
        for key, t in tensors.items():
            if key.startswith("graph.state."):
                graph._set_recurrent_state(key[len("graph.state."):], t)
    _core.set_rng_state(tuple(json.loads(meta["rng"])))
    result = dict(meta)
    if "step" in result:
        result["step"] = int(result["step"])
    return result
