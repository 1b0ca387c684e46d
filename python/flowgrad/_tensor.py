"""Display of tensors: NumPy's printing of the values, then dtype, device and grad_fn."""
import numpy as np

from . import _core


def _values(t):
    if t.dtype == _core.bfloat16:
        t = t.float()
    if str(t.device) != "cpu":
        return "<on " + str(t.device) + ">"
    return np.array2string(t.numpy(), separator=", ", prefix="tensor(", threshold=1000)


def _repr(t):
    extras = []
    if t.dtype not in (_core.float32, _core.int64, _core.bool):
        extras.append(f"dtype={t.dtype!r}")
    if str(t.device) != "cpu":
        extras.append(f"device='{t.device}'")
    if t.grad_fn is not None:
        extras.append(f"grad_fn={t.grad_fn}")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + ", ".join([_values(t)] + extras) + ")"


def _format(t, spec):
    """f"{loss:.4f}": a one-element tensor formats as its Python number; others only with ""."""
    if t.numel() == 1:
        return format(t.item(), spec)
    if spec:
        raise TypeError(f"unsupported format string {spec!r} for a tensor of shape {tuple(t.shape)}: "
                        "only one-element tensors take a format spec (format t.item() or t.tolist())")
    return _repr(t)


_core.Tensor.__repr__ = _repr
_core.Tensor.__format__ = _format
_core.Tensor.__str__ = _repr
_core.Tensor.T = property(lambda t: t.permute(*reversed(range(t.ndim))), doc="All dims reversed.")
_core.dtype.__repr__ = lambda d: f"flowgrad.{d.name}"
_core.dtype.__str__ = _core.dtype.__repr__
