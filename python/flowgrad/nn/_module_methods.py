"""Module methods as PyTorch has them: parameters() an iterator (next(m.parameters()) is
idiomatic; list(...) for a list), zero_grad(set_to_none=), add_module, and slices of
Sequential / ModuleList. Installed on fg.nn.Module and the containers."""
from .. import _core
from .._grad_mode import no_grad

_parameter_list = _core.Module.parameters
_grads_to_none = _core.Module.zero_grad


def parameters(self, recurse=True):
    """The parameters, in definition order (shared ones once), as an iterator."""
    return iter(_parameter_list(self, recurse))


def zero_grad(self, set_to_none=True):
    """Drops every parameter's .grad (set_to_none=False: fills the gradients with zeros in place)."""
    if set_to_none:
        _grads_to_none(self)
        return
    with no_grad():
        for p in _parameter_list(self, True):
            if p.grad is not None:
                p.grad.zero_()


def add_module(self, name, module):
    """Registers module as a child under name (register_module)."""
    if not isinstance(name, str):
        raise TypeError(f"add_module: name must be a string, got {type(name).__name__}")
    if module is not None and not isinstance(module, _core.Module):
        raise TypeError(f"add_module: {type(module).__name__} is not an fg.nn.Module")
    self.register_module(name, module)


_sequential_item = _core.Sequential.__getitem__
_module_list_item = _core.ModuleList.__getitem__


def _sequential_getitem(self, index):
    """seq[i] is a child; seq[a:b] a new Sequential of those children under their names (PyTorch's)."""
    if not isinstance(index, slice):
        return _sequential_item(self, index)
    out = _core.Sequential()
    for name, child in list(self.named_children())[index]:
        out.register_module(name, child)
    return out


def _module_list_getitem(self, index):
    """modules[i] is a child; modules[a:b] a new ModuleList of those children, numbered from 0."""
    if not isinstance(index, slice):
        return _module_list_item(self, index)
    return _core.ModuleList(list(self)[index])


_core.Module.parameters = parameters
_core.Module.zero_grad = zero_grad
_core.Module.add_module = add_module
_core.Sequential.__getitem__ = _sequential_getitem
_core.ModuleList.__getitem__ = _module_list_getitem
