"""PyTorch's remaining activation modules over fg.nn.functional (Python composes flowgrad's ops):
Hardtanh, ReLU6, Hardsigmoid, Hardswish, SELU, CELU, PReLU, LogSigmoid, GLU, Softsign and
Tanhshrink. inplace=True is accepted everywhere PyTorch takes it and computes out of place (the
values are PyTorch's; flowgrad's autograd keeps the input), as nn.ReLU(True)."""
import warnings

from .. import _core
from . import functional as F

__all__ = ["Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "SELU", "CELU", "PReLU", "LogSigmoid", "GLU",
           "Softsign", "Tanhshrink"]


class _Applies(_core.Module):
    """An activation without options: forward applies the class's functional form."""
    function = None

    def forward(self, x):
        return type(self).function(x)


class _Inplace(_Applies):
    """An activation whose only option is PyTorch's inplace flag (kept for the repr)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Hardtanh(_core.Module):
    """F.hardtanh: input clamped to [min_val, max_val]; min_val > max_val raises
    InvalidArgumentError. min_value / max_value are PyTorch's deprecated names of min_val /
    max_val: given, they replace them, with PyTorch's FutureWarning."""

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        for old, new, value in (("min_value", "min_val", min_value), ("max_value", "max_val", max_value)):
            if value is not None:
                warnings.warn(f"Hardtanh: keyword argument `{old}` is deprecated and renamed to `{new}`",
                              FutureWarning, stacklevel=2)
        min_val = min_val if min_value is None else min_value
        max_val = max_val if max_value is None else max_value
        if min_val > max_val:
            raise _core.InvalidArgumentError(f"Hardtanh: min_val must be <= max_val, got min_val={min_val}, "
                                             f"max_val={max_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x):
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(_Inplace):
    """F.relu6: min(max(x, 0), 6)."""
    function = staticmethod(F.relu6)


class Hardsigmoid(_Inplace):
    """F.hardsigmoid: relu6(x + 3) / 6."""
    function = staticmethod(F.hardsigmoid)


class Hardswish(_Inplace):
    """F.hardswish: x * relu6(x + 3) / 6."""
    function = staticmethod(F.hardswish)


class SELU(_Inplace):
    """F.selu: scale * elu(x, alpha) with PyTorch's constants."""
    function = staticmethod(F.selu)


class CELU(_core.Module):
    """F.celu: x where positive, alpha * (exp(x / alpha) - 1) elsewhere; alpha 0 raises
    InvalidArgumentError."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        if alpha == 0:
            raise _core.InvalidArgumentError("CELU: alpha must not be 0 (it divides the input), got 0")
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x):
        return F.celu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class PReLU(_core.Module):
    """F.prelu with a learnt slope: `weight` holds num_parameters slopes (1, or the input's channel
    count, dim 1), all initialised to `init`."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        if not isinstance(num_parameters, int) or isinstance(num_parameters, bool) or num_parameters <= 0:
            raise _core.InvalidArgumentError(f"PReLU: num_parameters must be a positive int, got {num_parameters!r}")
        self.num_parameters = num_parameters
        weight = _core.full((num_parameters,), float(init), dtype=dtype or _core.float32, device=device or "cpu")
        self.weight = _core._parameter(weight, True)

    def forward(self, x):
        return F.prelu(x, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class LogSigmoid(_Applies):
    """F.logsigmoid: log(sigmoid(x)), computed as -softplus(-x)."""
    function = staticmethod(F.logsigmoid)


class GLU(_core.Module):
    """F.glu: a * sigmoid(b) for the two halves a, b of the input along dim."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.glu(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softsign(_Applies):
    """F.softsign: x / (1 + |x|)."""
    function = staticmethod(F.softsign)


class Tanhshrink(_Applies):
    """F.tanhshrink: x - tanh(x)."""
    function = staticmethod(F.tanhshrink)
