"""Modules written in Python over flowgrad's ops: activations with options, and the ModuleDict /
ParameterList containers (they register their entries as a Module's attributes, so parameters,
state_dict, .to() and compiled steps see them)."""
from .. import _core
from . import functional as F

import math

__all__ = ["LeakyReLU", "ELU", "Softplus", "Mish", "ModuleDict", "ParameterList", "Conv1d", "ConvTranspose2d",
           "AdaptiveAvgPool2d", "Upsample", "Dropout2d", "InstanceNorm2d", "ReflectionPad2d", "ReplicationPad2d",
           "ZeroPad2d", "PixelShuffle", "PixelUnshuffle", "LogSoftmax", "ParameterDict", "Unflatten", "MaxPool1d",
           "AvgPool1d", "AdaptiveAvgPool1d"]


class LeakyReLU(_core.Module):
    """F.leaky_relu with negative_slope; inplace=True is accepted and computes out of place."""

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class ELU(_core.Module):
    """F.elu with alpha."""

    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class Softplus(_core.Module):
    """softplus(beta * x) / beta, and x itself where beta * x > threshold (PyTorch's)."""

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        if not beta > 0:
            raise _core.InvalidArgumentError(f"Softplus: beta must be > 0, got {beta}")
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        scaled = x * self.beta if self.beta != 1 else x
        soft = _core.softplus(scaled) / self.beta if self.beta != 1 else _core.softplus(scaled)
        return _core.where(scaled > self.threshold, x, soft)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSoftmax(_core.Module):
    """F.log_softmax along dim as a module (dim=None: PyTorch's legacy choice, dim 0 for 0-, 1- and
    3-d inputs and 1 otherwise)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        dim = self.dim if self.dim is not None else (0 if x.ndim in (0, 1, 3) else 1)
        return F.log_softmax(x, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Mish(_core.Module):
    """x * tanh(softplus(x))."""

    def forward(self, x):
        return F.mish(x)


def _key(owner, key):
    if not isinstance(key, str) or not key or "." in key:
        raise _core.InvalidArgumentError(f"{owner}: keys must be non-empty strings without '.', got {key!r}")
    return key


class ModuleDict(_core.Module):
    """Modules by name, in insertion order: d['name'], d['name'] = module, keys/values/items, len,
    in, update. Each is registered as a submodule under its name."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key, module):
        if not isinstance(module, _core.Module):
            raise TypeError(f"ModuleDict: values must be fg.nn.Module instances, got {type(module).__name__}")
        setattr(self, _key("ModuleDict", key), module)

    def __delitem__(self, key):
        self[key]  # noqa: B018  (KeyError for a missing key)
        delattr(self, key)

    def __len__(self):
        return len(self.named_children())

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, key):
        return any(name == key for name, _ in self.named_children())

    def keys(self):
        return [name for name, _ in self.named_children()]

    def values(self):
        return [m for _, m in self.named_children()]

    def items(self):
        return self.named_children()

    def update(self, modules):
        """Adds (or replaces) entries from a dict or (name, module) pairs."""
        for key, module in (modules.items() if hasattr(modules, "items") else modules):
            self[key] = module

    def forward(self, *args):
        raise _core.InvalidArgumentError("ModuleDict has no forward: call its modules")


class ParameterList(_core.Module):
    """Parameters by position: p[i], p[i] = tensor, len, iteration, append, extend. Each is
    registered as a parameter named by its index."""

    def __init__(self, values=None):
        super().__init__()
        self._count = 0
        if values is not None:
            self.extend(values)

    def _index(self, i):
        if not isinstance(i, int):
            raise TypeError(f"ParameterList: indices must be ints, got {type(i).__name__}")
        if not -self._count <= i < self._count:
            raise IndexError(f"ParameterList: index {i} is out of range for {self._count} parameters")
        return str(i % self._count)

    def __getitem__(self, i):
        return getattr(self, self._index(i))

    def __setitem__(self, i, value):
        self.register_parameter(self._index(i), value)

    def __len__(self):
        return self._count

    def __iter__(self):
        return iter([self[i] for i in range(self._count)])

    def append(self, value):
        """Adds a parameter (a tensor becomes one) at the end; returns self."""
        if not isinstance(value, _core.Tensor):
            raise TypeError(f"ParameterList: values must be tensors, got {type(value).__name__}")
        self.register_parameter(str(self._count), value)
        self._count += 1
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def forward(self, *args):
        raise _core.InvalidArgumentError("ParameterList has no forward: use its parameters")


class ParameterDict(_core.Module):
    """Parameters by name, in insertion order: p['name'], p['name'] = tensor, keys/values/items,
    len, in, iteration over the keys, update. Each is registered as a parameter under its name (a
    tensor that is not one yet becomes one, as in ParameterList)."""

    def __init__(self, parameters=None):
        super().__init__()
        self._names = []
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        if key not in self._names:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key, value):
        if not isinstance(value, _core.Tensor):
            raise TypeError(f"ParameterDict: values must be tensors, got {type(value).__name__}")
        if key not in self._names and (hasattr(type(self), key) or key in vars(self)):
            raise _core.InvalidArgumentError(f"ParameterDict: key {key!r} is taken by a ParameterDict attribute "
                                             f"(entries are attributes); choose another name")
        self.register_parameter(_key("ParameterDict", key), value)
        if key not in self._names:
            self._names.append(key)

    def __delitem__(self, key):
        self[key]  # noqa: B018  (KeyError for a missing key)
        delattr(self, key)
        self._names.remove(key)

    def __len__(self):
        return len(self._names)

    def __iter__(self):
        return iter(list(self._names))

    def __contains__(self, key):
        return key in self._names

    def keys(self):
        return list(self._names)

    def values(self):
        return [getattr(self, k) for k in self._names]

    def items(self):
        return [(k, getattr(self, k)) for k in self._names]

    def update(self, parameters):
        """Adds (or replaces) entries from a dict or (name, tensor) pairs."""
        for key, value in (parameters.items() if hasattr(parameters, "items") else parameters):
            self[key] = value

    def forward(self, *args):
        raise _core.InvalidArgumentError("ParameterDict has no forward: use its parameters")


class Unflatten(_core.Module):
    """Splits dim of the input into unflattened_size (a tuple or list of ints, one of them may be
    -1), whose product must be that dim's size: the inverse of nn.Flatten."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        sizes = tuple(unflattened_size) if isinstance(unflattened_size, (tuple, list)) else None
        if not isinstance(dim, int) or not sizes or not all(isinstance(n, int) and (n >= 0 or n == -1)
                                                            for n in sizes) or sizes.count(-1) > 1:
            raise _core.InvalidArgumentError(f"Unflatten: expected an int dim and a non-empty tuple of sizes (at most "
                                             f"one -1), got dim={dim!r}, unflattened_size={unflattened_size!r}")
        self.dim, self.unflattened_size = dim, sizes

    def forward(self, x):
        if not -x.dim() <= self.dim < x.dim():
            raise _core.ShapeError(f"Unflatten: dim {self.dim} is out of range for input {tuple(x.shape)}")
        dim = self.dim % x.dim()
        size, known = x.shape[dim], math.prod(n for n in self.unflattened_size if n != -1)
        sizes = self.unflattened_size
        if -1 in sizes and known and size % known == 0:
            sizes = tuple(size // known if n == -1 else n for n in sizes)
        if math.prod(sizes) != size or -1 in sizes:
            raise _core.ShapeError(f"Unflatten: sizes {self.unflattened_size} do not multiply to dim {self.dim}'s size "
                                   f"{size} of input {tuple(x.shape)}")
        return x.reshape(*x.shape[:dim], *sizes, *x.shape[dim + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class MaxPool1d(_core.Module):
    """F.max_pool1d over (N, C, L) or (C, L) with PyTorch's arguments (stride defaults to
    kernel_size; padding at most half the kernel; dilation; ceil_mode; return_indices)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation, self.return_indices, self.ceil_mode = padding, dilation, return_indices, ceil_mode

    def forward(self, x):
        return F.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(_core.Module):
    """F.avg_pool1d over (N, C, L) or (C, L) with PyTorch's arguments and divisors."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(_core.Module):
    """F.adaptive_avg_pool1d to output_size."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool1d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


def _conv_parameters(module, in_channels, out_channels, kernel_size, stride, padding, weight_shape, fan_in, bias):
    """Checks a convolution module's sizes, keeps them as attributes and registers its weight and
    bias, uniform in +-1/sqrt(fan_in) (PyTorch's initialisation)."""
    if min(in_channels, out_channels, kernel_size, stride) <= 0 or padding < 0:
        raise _core.InvalidArgumentError(
            f"{type(module).__name__}: need positive channels, kernel_size and stride and padding >= 0, got "
            f"in_channels={in_channels}, out_channels={out_channels}, kernel_size={kernel_size}, stride={stride}, "
            f"padding={padding}")
    module.in_channels, module.out_channels, module.kernel_size = in_channels, out_channels, kernel_size
    module.stride, module.padding = stride, padding
    bound = 1.0 / math.sqrt(fan_in)
    module.weight = _core._parameter(_core.init.uniform_(_core.empty(*weight_shape), -bound, bound), True)
    if bias:
        module.bias = _core._parameter(_core.init.uniform_(_core.empty(out_channels), -bound, bound), True)
    else:
        module.register_parameter("bias", None)


class Conv1d(_core.Module):
    """F.conv1d with a weight (out_channels, in_channels, kernel_size) and a bias, initialised as
    PyTorch does (uniform in +-1/sqrt(in_channels * kernel_size))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        _conv_parameters(self, in_channels, out_channels, kernel_size, stride, padding,
                         (out_channels, in_channels, kernel_size), in_channels * kernel_size, bias)

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class ConvTranspose2d(_core.Module):
    """F.conv_transpose2d with a weight (in_channels, out_channels, k, k) and a bias, initialised as
    PyTorch does (uniform in +-1/sqrt(out_channels * k * k))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, bias=True):
        super().__init__()
        _conv_parameters(self, in_channels, out_channels, kernel_size, stride, padding,
                         (in_channels, out_channels, kernel_size, kernel_size), out_channels * kernel_size ** 2, bias)
        self.output_padding = output_padding

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, output_padding={self.output_padding}")


class AdaptiveAvgPool2d(_core.Module):
    """F.adaptive_avg_pool2d to output_size (an int or (h, w))."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class Upsample(_core.Module):
    """F.interpolate with size or scale_factor, mode 'nearest' or 'bilinear' (align_corners)."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self):
        return f"size={self.size}, scale_factor={self.scale_factor}, mode={self.mode!r}"


class Dropout2d(_core.Module):
    """F.dropout2d: whole channels zeroed with probability p in training."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise _core.InvalidArgumentError(f"Dropout2d: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout2d(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class InstanceNorm2d(_core.Module):
    """F.instance_norm over (N, C, H, W): per-channel weight and bias with affine=True; running
    statistics (used in eval mode) with track_running_stats=True. Names as PyTorch's."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = _core._parameter(_core.ones(num_features), True)
            self.bias = _core._parameter(_core.zeros(num_features), True)
        if track_running_stats:
            self.register_buffer("running_mean", _core.zeros(num_features))
            self.register_buffer("running_var", _core.ones(num_features))
            self.register_buffer("num_batches_tracked", _core.zeros((), dtype=_core.int64))

    def forward(self, x):
        if x.dim() != 4 or x.shape[1] != self.num_features:
            raise _core.ShapeError(f"InstanceNorm2d: expected (N, {self.num_features}, H, W), got {tuple(x.shape)}")
        tracked = self.track_running_stats
        use_input = self.training or not tracked
        if tracked and self.training:
            self.num_batches_tracked.add_(1)
        return F.instance_norm(x, self.running_mean if tracked else None, self.running_var if tracked else None,
                               self.weight if self.affine else None, self.bias if self.affine else None,
                               use_input, self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class _Pad2d(_core.Module):
    mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,) * 4
        if len(self.padding) != 4:
            raise _core.InvalidArgumentError(f"{type(self).__name__}: padding must be an int or (left, right, top, "
                                             f"bottom), got {padding!r}")

    def forward(self, x):
        return F.pad(x, self.padding, self.mode)

    def extra_repr(self):
        return f"{self.padding}"


class ReflectionPad2d(_Pad2d):
    """F.pad(x, padding, 'reflect') over the last two dims; padding an int or (left, right, top, bottom)."""
    mode = "reflect"


class ReplicationPad2d(_Pad2d):
    """F.pad(x, padding, 'replicate') over the last two dims."""
    mode = "replicate"


class ZeroPad2d(_Pad2d):
    """F.pad(x, padding) with zeros over the last two dims."""


class PixelShuffle(_core.Module):
    """F.pixel_shuffle by upscale_factor."""

    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return F.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(_core.Module):
    """F.pixel_unshuffle by downscale_factor."""

    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return F.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"
