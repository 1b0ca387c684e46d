"""PyTorch's constructor forms for C++ layers: nn.ReLU(True), nn.Conv2d(3, 8, (3, 3), (1, 1),
(1, 1)). Each name here builds the C++ layer itself (isinstance works both ways, as for
nn.Parameter), so compiled steps, pickling and state_dict treat it as the built-in it is."""
from .. import _core


class _Builds(type):
    """The metaclass of a name that builds instances of `_layer`: isinstance and issubclass answer
    for that C++ class."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._layer)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._layer)


class ReLU(metaclass=_Builds):
    """max(x, 0) as a module. inplace=True is accepted and computes out of place (flowgrad's
    autograd keeps the input; the values are PyTorch's)."""
    _layer = _core.ReLU

    def __new__(cls, inplace=False):
        return _core.ReLU()


def _pair(value, what):
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise _core.InvalidArgumentError(f"Conv2d: {what} must be an int or a pair of ints, got {value!r}")
    return pair


class Conv2d(metaclass=_Builds):
    """2-D convolution over NCHW input with PyTorch's arguments: kernel_size, stride and padding
    as ints or (h, w) pairs, padding also 'valid' or 'same' (stride 1, odd kernel). The C++ layer
    takes square kernels with one stride and one padding; other shapes, dilation, groups and
    padding modes other than 'zeros' are refused with InvalidArgumentError."""
    _layer = _core.Conv2d

    def __new__(cls, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                padding_mode="zeros"):
        kernel = _pair(kernel_size, "kernel_size")
        steps = _pair(stride, "stride")
        if padding in ("valid", "same"):
            if padding == "same" and (steps != (1, 1) or kernel[0] % 2 == 0 or kernel[1] % 2 == 0):
                raise _core.InvalidArgumentError(f"Conv2d: padding='same' needs stride 1 and an odd kernel, got "
                                                 f"kernel_size={kernel_size!r}, stride={stride!r}")
            padding = (kernel[0] // 2, kernel[1] // 2) if padding == "same" else 0
        pads = _pair(padding, "padding")
        unsupported = [what for what, bad in [
            (f"kernel_size {kernel_size!r} (not square)", kernel[0] != kernel[1]),
            (f"stride {stride!r} (two values)", steps[0] != steps[1]),
            (f"padding {padding!r} (two values)", pads[0] != pads[1]),
            (f"dilation {dilation!r}", _pair(dilation, "dilation") != (1, 1)),
            (f"groups {groups!r}", groups != 1),
            (f"padding_mode {padding_mode!r}", padding_mode != "zeros")] if bad]
        if unsupported:
            raise _core.InvalidArgumentError("Conv2d: flowgrad's layer has square kernels, one stride and one padding, "
                                             "no dilation or groups and zero padding; got " + ", ".join(unsupported))
        return _core.Conv2d(in_channels, out_channels, kernel[0], steps[0], pads[0], bias)
