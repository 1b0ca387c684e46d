"""PyTorch's constructor forms for C++ layers: nn.ReLU(True), nn.Conv2d(3, 8, (3, 3), (1, 1),
(1, 1)), nn.Dropout(p, inplace=), nn.LayerNorm(d, elementwise_affine=, bias=), nn.MaxPool2d(3, 2,
padding=1), nn.Sequential(OrderedDict(...)). Each name here builds the C++ layer itself where it can (isinstance works both ways, as
for nn.Parameter), so compiled steps, pickling and state_dict treat it as the built-in it is;
convolutions the C++ layer lacks (groups, dilation, rectangular kernels) are a Python module."""
import math

from .. import _core
from . import functional as F


class _Builds(type):
    """The metaclass of a name that builds instances of `_layers`: isinstance and issubclass answer
    for those classes."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._layers)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._layers)


class ReLU(metaclass=_Builds):
    """max(x, 0) as a module. inplace=True is accepted and computes out of place (flowgrad's
    autograd keeps the input; the values are PyTorch's)."""
    _layers = _core.ReLU

    def __new__(cls, inplace=False):
        return _core.ReLU()


def _pair(value, what, owner="Conv2d"):
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise _core.InvalidArgumentError(f"{owner}: {what} must be an int or a pair of ints, got {value!r}")
    return pair


class GroupedConv2d(_core.Module):
    """What nn.Conv2d builds when the C++ layer cannot: F.conv2d with rectangular kernels, a
    padding pair or 'same', dilation, groups, or a padding_mode ('reflect', 'replicate',
    'circular' pad the input first). Weight (O, C / groups, kH, kW) and bias initialised as
    PyTorch's (uniform in +-1/sqrt(C / groups * kH * kW))."""

    def __init__(self, in_channels, out_channels, kernel, stride, padding, dilation, groups, bias, padding_mode):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise _core.InvalidArgumentError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must "
                                             f"be multiples of groups {groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise _core.InvalidArgumentError(f"Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' or "
                                             f"'circular', got {padding_mode!r}")
        if padding_mode != "zeros" and isinstance(padding, str):
            raise _core.InvalidArgumentError(f"Conv2d: padding_mode {padding_mode!r} needs padding as numbers, got "
                                             f"{padding!r}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.padding_mode = padding_mode
        bound = 1.0 / math.sqrt(in_channels // groups * kernel[0] * kernel[1])
        shape = (out_channels, in_channels // groups) + kernel
        self.weight = _core._parameter(_core.init.uniform_(_core.empty(*shape), -bound, bound), True)
        if bias:
            self.bias = _core._parameter(_core.init.uniform_(_core.empty(out_channels), -bound, bound), True)
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        padding = self.padding
        if self.padding_mode != "zeros":
            ph, pw = padding
            x, padding = F.pad(x, (pw, pw, ph, ph), self.padding_mode), 0
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}")


class Conv2d(metaclass=_Builds):
    """2-D convolution over NCHW input with PyTorch's arguments: kernel_size, stride, padding and
    dilation as ints or (h, w) pairs, padding also 'valid' or 'same', groups, padding_mode. A
    square kernel with one padding and nothing else is the C++ layer; the rest a GroupedConv2d
    over F.conv2d. Strides must be equal (InvalidArgumentError otherwise)."""
    _layers = (_core.Conv2d, GroupedConv2d)

    def __new__(cls, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                padding_mode="zeros"):
        kernel = _pair(kernel_size, "kernel_size")
        steps = _pair(stride, "stride")
        dilation = _pair(dilation, "dilation")
        if steps[0] != steps[1]:
            raise _core.InvalidArgumentError(f"Conv2d: stride {stride!r} has two values; flowgrad's convolution takes "
                                             "one stride")
        if padding == "same" and steps != (1, 1):
            raise _core.InvalidArgumentError(f"Conv2d: padding='same' needs stride 1, got stride={stride!r}")
        if padding == "same" and kernel[0] % 2 and kernel[1] % 2 and dilation == (1, 1):
            padding = (kernel[0] // 2, kernel[1] // 2)
        pads = padding if isinstance(padding, str) else _pair(padding, "padding")
        if kernel[0] == kernel[1] and pads != "same" and (pads == "valid" or pads[0] == pads[1]) \
                and dilation == (1, 1) and groups == 1 and padding_mode == "zeros":
            return _core.Conv2d(in_channels, out_channels, kernel[0], steps[0], 0 if pads == "valid" else pads[0], bias)
        return GroupedConv2d(in_channels, out_channels, kernel, steps[0], pads, dilation, groups, bias, padding_mode)


_dropout_init = _core.Dropout.__init__


def _dropout_init_with_inplace(self, p=0.5, inplace=False):
    """Zeroes entries with probability p in training (scaling the rest by 1/(1-p)). inplace=True is
    accepted and computes out of place, as nn.ReLU(True)."""
    _dropout_init(self, p)


_core.Dropout.__init__ = _dropout_init_with_inplace

_sequential_init = _core.Sequential.__init__


def _sequential_init_with_names(self, *args):
    """Runs modules in order: Sequential(m1, m2, ...) numbers them, Sequential(OrderedDict) names them."""
    if len(args) == 1 and isinstance(args[0], dict):
        _sequential_init(self)
        for name, module in args[0].items():
            self.add_module(name, module)
        return
    _sequential_init(self, *args)


_core.Sequential.__init__ = _sequential_init_with_names


def _embedding_from_pretrained(embeddings, freeze=True, padding_idx=None):
    """An Embedding whose weight is `embeddings` (num_embeddings, embedding_dim), sharing its data
    as PyTorch's does; freeze=True (the default) leaves it out of training (requires_grad False)."""
    if not isinstance(embeddings, _core.Tensor) or embeddings.ndim != 2:
        raise _core.ShapeError(f"Embedding.from_pretrained: embeddings must be a 2-D tensor, got "
                               f"{getattr(embeddings, 'shape', type(embeddings).__name__)}")
    module = _core.Embedding(embeddings.shape[0], embeddings.shape[1], padding_idx)
    module.weight = _core._parameter(embeddings.detach(), not freeze)
    return module


_core.Embedding.from_pretrained = staticmethod(_embedding_from_pretrained)


class PartialLayerNorm(_core.Module):
    """What nn.LayerNorm builds with elementwise_affine=False (no parameters) or bias=False (a
    weight only): F.layer_norm over the trailing normalized_shape dims."""

    def __init__(self, normalized_shape, eps, elementwise_affine, bias):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        affine = elementwise_affine
        self.weight = _core._parameter(_core.ones(*self.normalized_shape), True) if affine else None
        self.bias = _core._parameter(_core.zeros(*self.normalized_shape), True) if affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, " \
               f"bias={self.bias is not None}"


class LayerNorm(metaclass=_Builds):
    """Layer normalisation over the trailing normalized_shape dims with PyTorch's arguments: with
    elementwise_affine and bias (the defaults) the C++ layer (weight and bias), otherwise a
    PartialLayerNorm (no parameters, or a weight only)."""
    _layers = (_core.LayerNorm, PartialLayerNorm)

    def __new__(cls, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        if elementwise_affine and bias:
            return _core.LayerNorm(normalized_shape, eps)
        return PartialLayerNorm(normalized_shape, eps, elementwise_affine, bias)


class PaddedMaxPool2d(_core.Module):
    """What nn.MaxPool2d builds with padding: the input padded with -inf (so padding never wins),
    then F.max_pool2d."""

    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        p = self.padding
        return F.max_pool2d(F.pad(x, (p, p, p, p), value=-math.inf), self.kernel_size, self.stride)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def _square(value, what):
    first, second = _pair(value, what, "MaxPool2d")
    if first != second:
        raise _core.InvalidArgumentError(f"MaxPool2d: {what} {value!r} has two values; flowgrad's pooling takes one")
    return first


class MaxPool2d(metaclass=_Builds):
    """2-D max pooling with PyTorch's arguments: kernel_size, stride (default kernel_size) and padding
    as ints or equal pairs; padding (at most half the kernel) makes a PaddedMaxPool2d. dilation,
    return_indices and ceil_mode other than their defaults raise InvalidArgumentError."""
    _layers = (_core.MaxPool2d, PaddedMaxPool2d)

    def __new__(cls, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        kernel = _square(kernel_size, "kernel_size")
        step = kernel if stride is None else _square(stride, "stride")
        pad = _square(padding, "padding")
        if _square(dilation, "dilation") != 1 or return_indices or ceil_mode:
            raise _core.InvalidArgumentError("MaxPool2d: dilation, return_indices and ceil_mode are not supported")
        if not 0 <= pad <= kernel // 2:
            raise _core.InvalidArgumentError(f"MaxPool2d: padding {padding!r} must be between 0 and half the kernel "
                                             f"size {kernel}")
        return _core.MaxPool2d(kernel, step) if pad == 0 else PaddedMaxPool2d(kernel, step, pad)
