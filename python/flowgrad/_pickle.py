"""pickle and copy.deepcopy for tensors, modules, graphs and optimizers (the data access is C++).

A pickled tensor keeps its dtype, shape, bytes, requires_grad, parameter mark and device. A
tensor reached through several handles (a model's parameter and an optimizer's reference to
it) is pickled once and comes back shared. A module pickles as its class, the constructor
arguments of its built-in C++ type, its own parameters, buffers and children, its training
flag and its Python attributes. A Graph deep-copies but does not pickle.
"""
import copy
import weakref

from . import _core


class _TensorData:
    """One tensor's contents in a pickle, shared by every handle to that tensor."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce__(self):
        return _core._tensor_from_state, _core._tensor_state(self.tensor)


_pickling = weakref.WeakValueDictionary()  # tensor identity -> its _TensorData while a pickle holds it


def _same(tensor):
    return tensor


def _tensor_reduce_ex(self, protocol):
    data = _pickling.get(hash(self))
    if data is None:
        data = _pickling[hash(self)] = _TensorData(self)
    return _same, (data,)


def _tensor_deepcopy(self, memo):
    key = ("flowgrad.Tensor", hash(self))  # Python handles differ; the tensor behind them is the identity
    if key not in memo:
        memo[key] = _core._copy_leaf(self)
    return memo[key]


def _rebuild_module(cls, args):
    base = next(c for c in cls.__mro__ if c.__module__.startswith(_core.__name__))
    module = cls.__new__(cls)
    _core._init_module(base, module, *args)  # base.__init__, bypassing a subclass's own __init__
    return module


def _module_reduce_ex(self, protocol):
    args = _core._module_config(self)
    if args is None:
        raise TypeError(f"cannot pickle or copy fg.{type(self).__name__}: this module type does not list the "
                        "constructor arguments that rebuild it")
    training, parameters, buffers, children = _core._module_state(self)
    state = {"training": training, "parameters": parameters, "buffers": buffers, "children": children,
             "attributes": dict(self.__dict__)}
    return _rebuild_module, (type(self), tuple(args)), state


def _module_setstate(self, state):
    _core._set_module_state(self, state["training"], state["parameters"], state["buffers"], state["children"])
    self.__dict__.update(state["attributes"])


def _graph_deepcopy(self, memo):
    def copy_tensor(t):  # recurrent state may carry history: its values are copied detached
        return copy.deepcopy(t, memo) if t.is_leaf else _core._copy_leaf(t.detach())

    graph = _core._graph_clone(self, lambda m: copy.deepcopy(m, memo), copy_tensor)
    memo[id(self)] = graph
    graph.__dict__.update(copy.deepcopy(self.__dict__, memo))
    return graph


def _graph_reduce_ex(self, protocol):
    raise TypeError("cannot pickle fg.Graph: a built flow's wiring (constructs, tags, references) has no "
                    "serialised form; copy.deepcopy(graph) copies it within a process, and across processes "
                    "rebuild the flow there and load fg.save(graph.state_dict(), path)")


_core.Tensor.__reduce_ex__ = _tensor_reduce_ex
_core.Tensor.__deepcopy__ = _tensor_deepcopy
_core.Tensor.__copy__ = lambda self: _core._copy_leaf(self)
_core.Module.__reduce_ex__ = _module_reduce_ex
_core.Module.__setstate__ = _module_setstate
_core.Graph.__deepcopy__ = _graph_deepcopy
_core.Graph.__reduce_ex__ = _graph_reduce_ex
