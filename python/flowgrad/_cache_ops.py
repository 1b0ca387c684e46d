"""Writes and reads at positions held in tensors, for caches (a KV cache written at the current
position, a window read at a device-side offset): index_copy_/index_copy, scatter_/scatter and
narrow with a tensor start, with PyTorch's semantics.

They are composed from registered ops, so they differentiate, trace into compiled plans and run on
every device those ops run on, with no host read: a write becomes one ``index_put_`` at row-major
positions of the size of what is written (not of the whole target), computed on the device from
the index and constant offsets that a plan folds. Index values are checked as gather's are (on the
CPU at once, on CUDA through the device error flag raised at the next host read); in eager code a
bad index raises ``fg.IndexOutOfRangeError`` naming the op, in a plan the message names the
``index_select`` that checks it."""
from . import _core

__all__ = ["index_copy", "scatter", "narrow"]

Tensor = _core.Tensor
_core_narrow = _core.narrow


def _dtype_name(t):
    return str(t.dtype).rsplit(".", 1)[-1]


def _check_tensor(x, op, what):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be an fg.Tensor, got {type(x).__name__}")
    return x


def _check_index_dtype(index, op):
    if index.dtype not in (_core.int32, _core.int64):
        raise _core.DTypeError(f"{op}: index must be int32 or int64, got {_dtype_name(index)}")


def _wrap_dim(dim, ndim, op):
    if not -ndim <= dim < ndim:
        raise _core.IndexOutOfRangeError(f"{op}: dim {dim} is out of range for a tensor of {ndim} dims "
                                         f"(expected [{-ndim}, {ndim - 1}])")
    return dim % ndim


def _same_place(x, other, op, what):
    if other.device != x.device:
        raise _core.DeviceError(f"{op}: {what} is on {other.device}, the tensor on {x.device}")


def _checked(index, size, op, dim):
    """index as int64 wrapped into [0, size), checked on the device (index_select over an arange)."""
    flat = index.reshape(-1)
    try:
        out = _core.index_select(_core.arange(size, dtype=_core.int64, device=index.device), 0, flat)
    except _core.IndexOutOfRangeError as e:
        detail = str(e).split(": ", 1)[-1].replace("dimension 0", f"dimension {dim}")
        raise _core.IndexOutOfRangeError(f"{op}: {detail}") from None
    return out.reshape(tuple(index.shape))


def _positions(shape, dim, coord, block):
    """int64 positions, of shape `block`, into a contiguous tensor of `shape`: each element of the
    block at its own coordinates, except along `dim`, where it is at `coord` (broadcast to the
    block). The constant part comes first so that a plan folds it."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    base = _core.zeros(*([1] * len(block)), dtype=_core.int64, device=coord.device)
    for d, n in enumerate(block):
        if d != dim and n != 1:
            view = [1] * len(block)
            view[d] = n
            base = base + _core.arange(n, dtype=_core.int64, device=coord.device).reshape(view) * strides[d]
    return _core.broadcast_to(base + coord * strides[dim], tuple(block))


def _index_copy_args(x, dim, index, source, op):
    _check_tensor(x, op, "input")
    _check_tensor(index, op, "index")
    _check_tensor(source, op, "source")
    if x.ndim == 0:
        raise _core.ShapeError(f"{op}: input must have at least one dim, got a 0-d tensor")
    dim = _wrap_dim(dim, x.ndim, op)
    _check_index_dtype(index, op)
    if index.ndim > 1:
        raise _core.ShapeError(f"{op}: index must be 1-D (or 0-d), got shape {tuple(index.shape)}")
    expected = list(x.shape)
    expected[dim] = index.numel()
    if list(source.shape) != expected:
        raise _core.ShapeError(f"{op}: source {tuple(source.shape)} must be the input {tuple(x.shape)} with dim "
                               f"{dim} of the index's length ({tuple(expected)})")
    if source.dtype != x.dtype:
        raise _core.DTypeError(f"{op}: source is {_dtype_name(source)}, the input {_dtype_name(x)} (expected the same dtype)")
    _same_place(x, index, op, "index")
    _same_place(x, source, op, "source")
    view = [1] * x.ndim
    view[dim] = index.numel()
    coord = _checked(index.reshape(-1), x.shape[dim], op, dim).reshape(view)
    return _positions(tuple(x.shape), dim, coord, expected)


def index_copy_(self, dim, index, source):
    """Copies source's slices into self along dim at the positions in the 1-D index, in place:
    ``self[..., index[i], ...] = source[..., i, ...]`` (PyTorch's index_copy_). source has self's
    shape with dim of the index's length and self's dtype; a repeated index keeps one of its slices.
    The index may live on the device (a cache position): no host read. Returns self."""
    return self.put_(_index_copy_args(self, dim, index, source, "index_copy_"), source)


def index_copy(input, dim, index, source):
    """Out-of-place index_copy_: a copy of input with source's slices at the index along dim."""
    positions = _index_copy_args(input, dim, index, source, "index_copy")
    return _core.clone(input).put_(positions, source)


def _scatter_args(x, dim, index, src, value, op):
    _check_tensor(x, op, "input")
    _check_tensor(index, op, "index")
    if (src is None) == (value is None):
        raise TypeError(f"{op}: give exactly one of src (a tensor) and value (a number)")
    if x.ndim == 0:
        raise _core.ShapeError(f"{op}: input must have at least one dim, got a 0-d tensor")
    dim = _wrap_dim(dim, x.ndim, op)
    _check_index_dtype(index, op)
    block = tuple(index.shape)
    if index.ndim != x.ndim or any(d != dim and n > x.shape[d] for d, n in enumerate(block)):
        raise _core.ShapeError(f"{op}: index {block} must have the input's {x.ndim} dims and be no larger than the "
                               f"input {tuple(x.shape)} in every dim except {dim}")
    _same_place(x, index, op, "index")
    if src is not None:
        _check_tensor(src, op, "src")
        if src.ndim != x.ndim or any(n > s for n, s in zip(block, src.shape)):
            raise _core.ShapeError(f"{op}: index {block} must be no larger than src {tuple(src.shape)} in every dim")
        if src.dtype != x.dtype:
            raise _core.DTypeError(f"{op}: src is {_dtype_name(src)}, the input {_dtype_name(x)} (expected the same dtype)")
        _same_place(x, src, op, "src")
        values = src if tuple(src.shape) == block else src[tuple(slice(0, n) for n in block)]
    else:
        values = _core.full((), value, dtype=x.dtype, device=x.device)
    coord = _checked(index, x.shape[dim], op, dim)
    return _positions(tuple(x.shape), dim, coord, block), values


def scatter_(self, dim, index, src=None, value=None):
    """Writes src's elements into self at the positions index gives along dim, in place:
    ``self[i][index[i][j][k]][k] = src[i][j][k]`` for dim 1 (PyTorch's scatter_). index has self's
    number of dims, is no larger than self in the other dims and no larger than src in any; only the
    index-shaped corner of src is read. ``value=`` writes one number instead. Returns self."""
    positions, values = _scatter_args(self, dim, index, src, value, "scatter_")
    return self.put_(positions, values)


def scatter(input, dim, index, src=None, value=None):
    """Out-of-place scatter_: a copy of input with src's elements (or value) at index along dim."""
    positions, values = _scatter_args(input, dim, index, src, value, "scatter")
    return _core.clone(input).put_(positions, values)


def narrow(input, dim, start, length):
    """input's `length` elements along dim from `start`. With an int start, a view (as before); with
    a start held in a 0-d (or one-element) integer tensor, e.g. a cache position on the device, a
    copy gathered at those positions with no host read (PyTorch reads the start on the host and
    returns a view: here writes into the result do not reach input). A negative start counts from
    the end; a window outside the dim raises fg.IndexOutOfRangeError."""
    if not isinstance(start, Tensor):
        return _core_narrow(input, dim, start, length)
    op = "narrow"
    _check_tensor(input, op, "input")
    if start.numel() != 1 or start.dtype not in (_core.int32, _core.int64):
        raise _core.DTypeError(f"narrow: a tensor start must be a 0-d integer tensor, got {_dtype_name(start)} of shape "
                               f"{tuple(start.shape)}")
    if input.ndim == 0:
        raise _core.ShapeError("narrow: input must have at least one dim, got a 0-d tensor")
    dim = _wrap_dim(dim, input.ndim, op)
    size = input.shape[dim]
    if not isinstance(length, int) or not 0 <= length <= size:
        raise _core.IndexOutOfRangeError(f"narrow: length {length} is out of range for dim {dim} of size {size}")
    _same_place(input, start, op, "start")
    s = start.reshape(1).long()
    s = _core.where(s < 0, s + size, s)
    # A window that does not fit points at `size`, which the index check refuses.
    fits = (s >= 0) & (s + length <= size)
    index = _core.where(fits, s + _core.arange(length, dtype=_core.int64, device=s.device), size)
    try:
        return _core.index_select(input, dim, index)
    except _core.IndexOutOfRangeError:
        raise _core.IndexOutOfRangeError(f"narrow: start {start.item()} with length {length} is out of range for "
                                         f"dim {dim} of size {size}") from None


def _narrow_method(self, dim, start, length):
    return narrow(self, dim, start, length)


_narrow_method.__doc__ = narrow.__doc__
for _name, _fn in [("index_copy_", index_copy_), ("index_copy", index_copy), ("scatter_", scatter_),
                   ("scatter", scatter), ("narrow", _narrow_method)]:
    setattr(Tensor, _name, _fn)
