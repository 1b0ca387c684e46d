"""state_dict under every name of a tied tensor, as PyTorch's: a weight shared by two modules (GPT-2's
``lm_head.weight`` and ``wte.weight``) is listed under both paths, and load_state_dict accepts a
state that holds any one of them (a checkpoint written by PyTorch, or by an older flowgrad that
listed a tied weight once)."""
from .. import _core

_unique_state_dict = _core.Module.state_dict
_unique_load_state_dict = _core.Module.load_state_dict


def _every_name(module):
    """(dotted name, tensor) of every parameter and buffer under every path that reaches it, in
    depth-first order (a loop, not recursion: trees may be 1000 modules deep)."""
    stack = [("", module)]
    while stack:
        prefix, m = stack.pop()
        for name, t in list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False)):
            yield prefix + name, t
        stack.extend((prefix + name + ".", child) for name, child in reversed(list(m.named_children())))


def tied_names(module):
    """{name: the name that Module.named_parameters/named_buffers give the same tensor} for every
    name of a tensor that is reachable under more than one (the other names map to themselves)."""
    first = {hash(t): n for n, t in list(module.named_parameters()) + list(module.named_buffers())}
    return {name: first[hash(t)] for name, t in _every_name(module) if hash(t) in first}


def state_dict(self) -> dict:
    """Parameters then buffers, detached, by dotted name; a tensor shared by several modules (a tied
    weight) is listed under each of its names, as in PyTorch."""
    out = _unique_state_dict(self)
    for name, t in _every_name(self):
        if name not in out:
            out[name] = t.detach()
    return out


def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
    """Copies the values of state_dict into the module's tensors (their identity kept). A tied
    tensor is loaded from whichever of its names the state holds. With strict, missing keys (a
    tensor none of whose names is present), unexpected keys and shape mismatches raise
    fg.InvalidArgumentError listing them; without, only shape mismatches."""
    canonical = tied_names(self)
    state = {}
    for key, value in state_dict.items():
        target = canonical.get(key, key)
        if target == key or target not in state_dict:  # the name named_parameters gives wins
            state.setdefault(target, value)
    _unique_load_state_dict(self, state, strict)


def missing_keys(module, own_keys, given_keys):
    """The keys of own_keys that the given keys do not provide under any name of the same tensor."""
    canonical = tied_names(module)
    provided = {canonical.get(k, k) for k in given_keys}
    return sorted(k for k in own_keys if k not in given_keys and canonical.get(k, k) not in provided)


_core.Module.state_dict = state_dict
_core.Module.load_state_dict = load_state_dict
