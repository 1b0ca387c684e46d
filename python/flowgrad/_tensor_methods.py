"""Tensor methods and functions PyTorch training scripts use, over flowgrad's ops: view_as, mm,
nelement, unique, is_cuda, .data, type(dtype), and finfo / iinfo. Installed on fg.Tensor at import."""
import collections

import numpy as np

from . import _core
from ._grad_mode import no_grad

__all__ = ["mm", "unique", "finfo", "iinfo"]

_FloatInfo = collections.namedtuple("finfo", "bits eps max min tiny smallest_normal resolution dtype")
_IntInfo = collections.namedtuple("iinfo", "bits max min dtype")


def finfo(type=None):  # noqa: A002  (PyTorch's name)
    """PyTorch's torch.finfo of a floating dtype (default: the default dtype): bits, eps, max, min,
    tiny (= smallest_normal), resolution and the dtype's name. bfloat16's are its 8-bit exponent and
    7-bit mantissa's."""
    dtype = type or _core.get_default_dtype()
    if not isinstance(dtype, _core.dtype) or not dtype.is_floating_point:
        raise TypeError(f"finfo: expected a floating fg.dtype, got {dtype!r}")
    if dtype == _core.bfloat16:
        largest = float((2 - 2 ** -7) * 2.0 ** 127)
        return _FloatInfo(16, 2 ** -7, largest, -largest, 2 ** -126, 2 ** -126, 0.01, "bfloat16")
    info = np.finfo(dtype.name)
    return _FloatInfo(info.bits, float(info.eps), float(info.max), float(info.min), float(info.tiny),
                      float(info.smallest_normal), 10.0 ** -info.precision, dtype.name)


def iinfo(type):  # noqa: A002  (PyTorch's name)
    """PyTorch's torch.iinfo of an integer dtype: bits, max, min and the dtype's name."""
    if not isinstance(type, _core.dtype) or type.is_floating_point or type == _core.bool:
        raise TypeError(f"iinfo: expected an integer fg.dtype, got {type!r}")
    info = np.iinfo(type.name)
    return _IntInfo(info.bits, int(info.max), int(info.min), type.name)

Tensor = _core.Tensor

_TYPE_NAMES = {
    _core.float32: "FloatTensor", _core.float64: "DoubleTensor", _core.float16: "HalfTensor",
    _core.bfloat16: "BFloat16Tensor", _core.int64: "LongTensor", _core.int32: "IntTensor",
    _core.int16: "ShortTensor", _core.int8: "CharTensor", _core.uint8: "ByteTensor", _core.bool: "BoolTensor",
}


def mm(input, mat2):
    """The matrix product of two 2-D tensors (matmul restricted to matrices, as PyTorch's mm)."""
    if not isinstance(input, Tensor) or not isinstance(mat2, Tensor):
        raise TypeError(f"mm: expected two fg.Tensors, got {type(input).__name__} and {type(mat2).__name__}")
    if input.dim() != 2 or mat2.dim() != 2:
        raise _core.ShapeError(f"mm: expected two 2-D tensors, got shapes {tuple(input.shape)} and {tuple(mat2.shape)}")
    return _core.matmul(input, mat2)


def unique(input, sorted=True, return_inverse=False, return_counts=False):  # noqa: A002  (PyTorch's name)
    """The distinct values of input, ascending (sorted=False gives the same order), as a 1-D
    tensor; with return_inverse, each element's index into them (input's shape); with
    return_counts, how often each occurs. One sort, then the run starts; reading their number is
    one host sync, as in PyTorch."""
    if not isinstance(input, Tensor):
        raise TypeError(f"unique: input must be an fg.Tensor, got {type(input).__name__}")
    flat = input.reshape(-1)
    keys = flat.to(dtype=_core.int64) if flat.dtype == _core.bool else flat
    with no_grad():
        values, order = _core.sort(keys, 0)
        n = values.shape[0]
        first = _core.ones(min(n, 1), dtype=_core.bool, device=flat.device)
        starts = _core.cat([first, values.narrow(0, 1, n - 1) != values.narrow(0, 0, n - 1)], 0) if n else first
        distinct = values[starts].to(dtype=input.dtype)
        out = [distinct]
        group = _core.cumsum(starts.to(dtype=_core.int64), 0) - 1
        if return_inverse:
            inverse = _core.zeros(n, dtype=_core.int64, device=flat.device)
            out.append(_core.scatter_add(inverse, 0, order, group).reshape(*input.shape))
        if return_counts:
            counts = _core.zeros(distinct.shape[0], dtype=_core.int64, device=flat.device)
            out.append(_core.scatter_add(counts, 0, group, _core.ones(n, dtype=_core.int64, device=flat.device)))
    return out[0] if len(out) == 1 else tuple(out)


def _type(self, dtype=None, non_blocking=False):
    """Without dtype: the type's name, 'flowgrad.FloatTensor' ('flowgrad.cuda.FloatTensor' on a GPU).
    With a dtype (or such a name, 'torch.LongTensor' too): self converted to it, self itself when
    it has that dtype already; a name with '.cuda.' also moves it to the GPU."""
    if dtype is None:
        return "flowgrad." + ("cuda." if self.is_cuda else "") + _TYPE_NAMES[self.dtype]
    if isinstance(dtype, str):
        name = dtype.rsplit(".", 1)[-1]
        found = [d for d, n in _TYPE_NAMES.items() if n == name]
        if not found:
            raise _core.InvalidArgumentError(f"type: unknown tensor type {dtype!r}; expected a dtype or one of "
                                             f"{sorted(_TYPE_NAMES.values())}")
        device = "cuda" if ".cuda." in dtype else "cpu"
        if found[0] == self.dtype and str(self.device).split(":")[0] == device:
            return self
        return self.to(device=device, dtype=found[0])
    if not isinstance(dtype, _core.dtype):
        raise TypeError(f"type: expected a dtype or a type name, got {type(dtype).__name__}")
    return self if dtype == self.dtype else self.to(dtype=dtype)


def _set_data(self, value):
    """t.data = v copies v's values in without autograd seeing it (PyTorch swaps the storage; here
    the shape and dtype must match, so views of t see the new values)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"Tensor.data: expected an fg.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(self.shape) or value.dtype != self.dtype:
        raise _core.ShapeError(f"Tensor.data: assigning {tuple(value.shape)} {value.dtype!r} to a tensor of "
                               f"{tuple(self.shape)} {self.dtype!r}; flowgrad copies in place, so both must match")
    with no_grad():
        self.detach().copy_(value)


Tensor.mm = mm
Tensor.unique = unique
Tensor.type = _type
Tensor.view_as = lambda self, other: self.view(*other.shape)
Tensor.view_as.__doc__ = "A view of self with other's shape."
Tensor.expand_as = lambda self, other: self.expand(*other.shape)
Tensor.expand_as.__doc__ = "self broadcast to other's shape (a view, as expand)."
Tensor.nelement = lambda self: self.numel()
Tensor.nelement.__doc__ = "The number of elements (numel)."
Tensor.is_cuda = property(lambda self: self.device.type == "cuda", doc="Whether the tensor lives on a GPU.")
Tensor.data = property(lambda self: self.detach(), _set_data,
                       doc="The values without autograd history, sharing memory (detach()); assignable.")
