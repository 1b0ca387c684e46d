"""fg.nn: modules, layers, parameters, initialisers, functional ops and utilities.

Subclass fg.nn.Module in Python: assigning a Parameter, a buffer (register_buffer) or another
Module to an attribute registers it, and forward defines the computation.
"""
from .. import _core
from .._core import (
    Module, Linear, Embedding, LayerNorm, RMSNorm, Dropout, Conv2d, MaxPool2d, AvgPool2d, Flatten,
    ReLU, GELU, SiLU, Tanh, Sigmoid, Softmax, Identity, Sequential, ModuleList, MultiheadAttention,
    TransformerBlock, GRUCell, LSTMCell, Checkpoint, BatchNorm1d, BatchNorm2d, GroupNorm, LSTM, GRU,
)
from . import functional, init, parallel, utils
from ._constructors import (  # PyTorch's argument forms over the C++ layers
    ReLU, Conv2d, GroupedConv2d, LayerNorm, PartialLayerNorm, MaxPool2d, PaddedMaxPool2d,
)
from . import _module_methods  # noqa: F401  (parameters() an iterator, zero_grad(set_to_none=), add_module)
from .losses import (
    MSELoss, L1Loss, SmoothL1Loss, HuberLoss, NLLLoss, CrossEntropyLoss, BCELoss, BCEWithLogitsLoss, KLDivLoss,
)
from ._kv_cache import KVCache
from ._transformer import (  # MultiheadAttention: flowgrad's layer, or PyTorch's form (TransformerAttention)
    MultiheadAttention, TransformerAttention, TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer,
    TransformerDecoder, Transformer,
)
from . import _tied  # noqa: F401  (state_dict keeps every name of a tied weight)
from ._composite import (
    LeakyReLU, ELU, Softplus, Mish, ModuleDict, ParameterList, Conv1d, ConvTranspose2d, AdaptiveAvgPool2d, Upsample,
    Dropout2d, InstanceNorm2d, ReflectionPad2d, ReplicationPad2d, ZeroPad2d, PixelShuffle, PixelUnshuffle, LogSoftmax,
    ParameterDict, Unflatten, MaxPool1d, AvgPool1d, AdaptiveAvgPool1d,
)
from ._activations import (
    Hardtanh, ReLU6, Hardsigmoid, Hardswish, SELU, CELU, PReLU, LogSigmoid, GLU, Softsign, Tanhshrink,
)


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _core.Tensor) and _core._is_parameter(obj)


class Parameter(metaclass=_ParameterMeta):
    """A tensor that a Module registers as a parameter when assigned to one of its attributes.

    fg.nn.Parameter(t) shares t's data and requires grad; isinstance(p, fg.nn.Parameter) works.
    """

    def __new__(cls, data, requires_grad=True):
        return _core._parameter(data, requires_grad)


__all__ = [n for n in dir() if not n.startswith("_")]
