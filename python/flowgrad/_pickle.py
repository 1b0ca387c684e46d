"""pickle and copy.deepcopy for tensors, modules, graphs and optimizers (the data access is C++).

A pickled tensor keeps its dtype, shape, bytes, requires_grad, parameter mark and device. A
tensor reached through several handles (a model's parameter and an optimizer's reference to
it) is pickled once and comes back shared. A module pickles as its class, the constructor
arguments of its built-in C++ type, its own parameters, buffers and children, its training
flag and its Python attributes. A Graph pickles as its wiring (the nodes as plain data), its
node modules, and what save_checkpoint(graph=) keeps (trend and timing histories, recurrent
state) plus its settings (frozen set, parallel, train/eval, profiling, log()); copy.deepcopy
also keeps the values collected for the open epoch, those of the last forward and the
on_log/on_flush/on_profile callbacks, which belong to the process that ran it.
"""
import copy
import pickle
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


class _Discard:
    def write(self, data):
        return len(data)


class _Probe(pickle.Pickler):
    """Pickles into nothing, skipping tensor contents: finds what a node cannot pickle."""

    def reducer_override(self, obj):
        return (_same, (None,)) if isinstance(obj, _core.Tensor) else NotImplemented


def _check_picklable(graph, nodes, protocol):
    """pickle.PicklingError naming the node and tag whose modules cannot be pickled (a lambda
    held by a Python module, a C++ module without constructor arguments), before pickle meets it
    somewhere below the Graph where it could not say which node holds it."""
    for name, node in zip(_core._graph_node_names(graph), nodes):
        try:
            _Probe(_Discard(), protocol).dump(node["modules"])
        except Exception as e:
            raise pickle.PicklingError(f"cannot pickle fg.Graph: {name} holds something pickle cannot store "
                                       f"({type(e).__name__}: {e})") from e


def _graph_reduce_ex(self, protocol):
    nodes, input_names, output = _core._graph_nodes(self)
    _check_picklable(self, nodes, protocol)
    state = {"parallel": self.parallel, "profiling": self.profiling, "log": _core._graph_log_settings(self),
             "frozen": _core._graph_frozen(self),
             "recurrent": {tag: t.detach() for tag, t in self._recurrent_state().items()},
             "trends": self._observation_state(), "timings": self._timing_state(),
             "attributes": dict(self.__dict__)}
    return _core._graph_from_nodes, (nodes, input_names, output, self.training), state


def _graph_setstate(self, state):
    self.parallel = state["parallel"]
    if state["profiling"]:
        self.enable_profiling()
    if state["log"] is not None:
        tags, total_epochs, every = state["log"]
        self.log(*tags, total_epochs=total_epochs, every=every)
    _core._graph_set_frozen(self, state["frozen"])
    for tag, value in state["recurrent"].items():
        self._set_recurrent_state(tag, value)
    self._restore_observation(state["trends"])
    self._restore_timings(state["timings"])
    self.__dict__.update(state["attributes"])


_core.Tensor.__reduce_ex__ = _tensor_reduce_ex
_core.Tensor.__deepcopy__ = _tensor_deepcopy
_core.Tensor.__copy__ = lambda self: _core._copy_leaf(self)
_core.Module.__reduce_ex__ = _module_reduce_ex
_core.Module.__setstate__ = _module_setstate
_core.Graph.__deepcopy__ = _graph_deepcopy
_core.Graph.__reduce_ex__ = _graph_reduce_ex
_core.Graph.__setstate__ = _graph_setstate
