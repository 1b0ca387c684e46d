"""fg.save / fg.load of anything that is not a flat {name: tensor} dict: whole modules, nested
dicts and lists of tensors, numbers, strings, NumPy arrays (the flat dict stays safetensors).

The container: a magic line, then a pickle of every tensor's contents (plain data: dtype name,
shape, bytes, flags, device; read without any class lookup), then a pickle of the object in
which each tensor is a persistent id into that table. Tensors shared by several entries are
stored once and come back shared; map_location rewrites each tensor's device before it is made.
weights_only=True unpickles the object with an allow-list (containers, numbers, strings, NumPy
arrays, dtypes), so a file cannot run code or build arbitrary classes."""
import collections
import io
import math
import pickle

from . import _core

MAGIC = b"\x89flowgrad.pickle/1\n"

# (module, name) pairs weights_only=True unpickles; everything else is refused.
_SAFE_GLOBALS = {
    ("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
    ("builtins", "slice"), ("builtins", "range"), ("builtins", "bytearray"), ("flowgrad._core", "dtype"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
}


# What flowgrad's own rebuilders stand for, so a refusal says what the file holds.
_WHAT = {("flowgrad._pickle", "_rebuild_module"): " (a whole module)", ("flowgrad._core", "_graph_from_nodes"):
         " (an fg.Graph)"}


class WeightsOnlyError(_core.CheckpointError, pickle.UnpicklingError):
    """fg.load(weights_only=True) met a class outside the allow-list (a pickle.UnpicklingError too,
    as PyTorch raises)."""


class _Pickler(pickle.Pickler):
    def __init__(self, file, protocol):
        super().__init__(file, protocol)
        self.tensors = {}  # tensor identity -> its contents

    def persistent_id(self, obj):
        if not isinstance(obj, _core.Tensor):
            return None
        key = hash(obj)  # the tensor behind the handle: handles to one tensor share one entry
        if key not in self.tensors:
            self.tensors[key] = _core._tensor_state(obj)
        return ("tensor", key)


def dumps(obj, protocol):
    payload = io.BytesIO()
    pickler = _Pickler(payload, protocol)
    pickler.dump(obj)
    return MAGIC + pickle.dumps(pickler.tensors, protocol) + payload.getvalue()


class _DataOnly(pickle.Unpickler):
    """The tensor table holds plain data only: no class is ever looked up."""

    def find_class(self, module, name):
        raise _core.CheckpointError(f"the tensor table names {module}.{name}; it holds plain data only")


def _target_device(map_location, location):
    if map_location is None:
        return location
    if isinstance(map_location, dict):
        return str(map_location.get(location, location))
    return str(map_location)


def _is_function(map_location):
    return callable(map_location) and not isinstance(map_location, (str, _core.device))


def _function_result(result, fallback):
    if result is None:  # PyTorch: None keeps the saved location
        return fallback()
    if not isinstance(result, _core.Tensor):
        raise _core.InvalidArgumentError(f"fg.load: map_location returned {type(result).__name__}, expected a "
                                         "Tensor or None")
    return result


def moved(tensor, map_location, location="cpu"):
    """A tensor read from a safetensors file (on the host) where map_location puts it."""
    if _is_function(map_location):
        return _function_result(map_location(tensor, location), lambda: tensor)
    target = _target_device(map_location, location)
    return tensor if str(tensor.device) == target else tensor.to(target)


def _make_tensor(state, map_location):
    """A table entry as a tensor where map_location puts it, made there (a parameter stays a leaf)."""
    dtype, shape, data, grad, parameter, location = state

    def made(where):
        return _core._tensor_from_state(dtype, list(shape), data, grad, parameter, where)
    if _is_function(map_location):
        return _function_result(map_location(made("cpu"), location), lambda: made(location))
    return made(_target_device(map_location, location))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, tensors, weights_only):
        super().__init__(file)
        self.tensors, self.weights_only = tensors, weights_only

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "tensor" and pid[1] in self.tensors):
            raise _core.CheckpointError(f"a tensor reference {pid!r:.80} that the tensor table lacks")
        return self.tensors[pid[1]]

    def find_class(self, module, name):
        if self.weights_only and (module, name) not in _SAFE_GLOBALS:
            raise WeightsOnlyError(
                f"fg.load: weights_only=True refuses {module}.{name}{_WHAT.get((module, name), '')} (it loads tensors, dicts, lists, tuples, sets, "
                "numbers, strings, NumPy arrays and dtypes only); pass weights_only=False to load whole modules "
                "and other objects from a file you trust")
        return super().find_class(module, name)


# Faults a damaged container raises while it is read (besides CheckpointError).
_CORRUPT = (pickle.UnpicklingError, EOFError, ArithmeticError, AttributeError, LookupError, TypeError, ValueError,
            ImportError, _core.FlowgradError)


def _checked_table(table):
    """The tensor table, each entry (dtype name, shape, bytes, requires_grad, parameter, device)
    with as many bytes as its dtype and shape need."""
    def sound(state):
        if not (isinstance(state, tuple) and len(state) == 6 and isinstance(state[0], str) and
                isinstance(state[1], tuple) and all(type(n) is int and n >= 0 for n in state[1]) and
                isinstance(state[2], bytes) and type(state[3]) is bool and type(state[4]) is bool and
                isinstance(state[5], str)):
            return False
        dtype = getattr(_core, state[0], None)
        return isinstance(dtype, _core.dtype) and len(state[2]) == math.prod(state[1]) * dtype.itemsize
    if not isinstance(table, dict) or not all(sound(v) for v in table.values()):
        raise _core.CheckpointError("the tensor table is malformed")
    return table


def loads(data, map_location, weights_only, name):
    """The object in a container (data, the whole file); `name` says which file in errors."""
    stream = io.BytesIO(data)
    stream.seek(len(MAGIC))

    def corrupt(e):
        return _core.CheckpointError(f"fg.load: {name} is damaged ({type(e).__name__}: {e})")
    try:
        table = _checked_table(_DataOnly(stream).load())
    except _CORRUPT as e:
        raise corrupt(e) from e
    tensors = {key: _make_tensor(state, map_location) for key, state in table.items()}  # device errors as they are
    try:
        return _Unpickler(stream, tensors, weights_only).load()
    except WeightsOnlyError:
        raise
    except _CORRUPT as e:
        raise corrupt(e) from e


def is_tensor_dict(obj):
    """A flat {str: tensor} dict: what safetensors stores."""
    return isinstance(obj, (dict, collections.OrderedDict)) and all(
        isinstance(k, str) and isinstance(v, _core.Tensor) for k, v in obj.items())
