"""Tensor functions PyTorch users reach for, composed from flowgrad's ops in Python: they
differentiate, trace into compiled steps and run on every device those ops run on. Gradients stay
finite where the composition would divide by zero (a norm at the origin has gradient 0, as in
PyTorch)."""
import builtins
import math

from . import _core
from ._grad_mode import enable_grad, no_grad

__all__ = ["isnan", "isinf", "isfinite", "any", "all", "isclose", "allclose", "tril", "triu", "diag", "outer",
           "roll", "lerp", "bmm", "meshgrid", "unbind", "masked_select", "inference_mode", "linalg", "bernoulli",
           "multinomial"]

Tensor = _core.Tensor


def _tensor(x, fn, what="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}: {what} must be an fg.Tensor, got {type(x).__name__}")
    return x


def _floating(x):
    return x.dtype.is_floating_point


def isnan(input):
    """Where input is NaN (False everywhere for integer and bool tensors)."""
    x = _tensor(input, "isnan")
    return x != x if _floating(x) else _core.zeros(*x.shape, dtype=_core.bool, device=x.device)


def isinf(input):
    """Where input is +inf or -inf."""
    x = _tensor(input, "isinf")
    return x.abs() == math.inf if _floating(x) else _core.zeros(*x.shape, dtype=_core.bool, device=x.device)


def isfinite(input):
    """Where input is neither NaN nor +-inf (x - x is 0 exactly there)."""
    x = _tensor(input, "isfinite")
    return (x - x) == 0 if _floating(x) else _core.ones(*x.shape, dtype=_core.bool, device=x.device)


def _reduce_bool(x, dim, keepdim, fn):
    x = _tensor(x, fn)
    count = (x == 0) if fn == "all" else (x != 0)
    total = count.sum(dim, keepdim)
    return total == 0 if fn == "all" else total > 0


def any(input, dim=None, keepdim=False):
    """Whether any element is nonzero (over dim, or all of them): a bool tensor."""
    return _reduce_bool(input, dim, keepdim, "any")


def all(input, dim=None, keepdim=False):
    """Whether every element is nonzero (over dim, or all of them): a bool tensor."""
    return _reduce_bool(input, dim, keepdim, "all")


def isclose(input, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    """|input - other| <= atol + rtol * |other| elementwise (equal infinities are close; NaNs only
    with equal_nan)."""
    a, b = _tensor(input, "isclose"), _tensor(other, "isclose", "other")
    if a.dtype != b.dtype:
        raise _core.DTypeError(f"isclose: input is {a.dtype!r} and other {b.dtype!r}; expected one dtype")
    if not _floating(a):
        return a == b
    finite = isfinite(a) & isfinite(b)  # |inf - (-inf)| <= rtol * inf would pass otherwise
    close = (finite & ((a - b).abs() <= atol + rtol * b.abs())) | (a == b)
    if equal_nan:
        close = close | ((a != a) & (b != b))
    return close


def allclose(input, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    """isclose everywhere, as a Python bool (one host read)."""
    return builtins.bool(all(isclose(input, other, rtol, atol, equal_nan)).item())


def _triangle(x, diagonal, fn, keep):
    x = _tensor(x, fn)
    if x.dim() < 2:
        raise _core.ShapeError(f"{fn}: expected a tensor of at least 2 dims, got shape {tuple(x.shape)}")
    rows, cols = x.shape[-2], x.shape[-1]
    offset = (_core.arange(cols, device=x.device).reshape(1, cols) -
              _core.arange(rows, device=x.device).reshape(rows, 1))  # col - row
    return _core.where(keep(offset, diagonal), x, _core.zeros((), dtype=x.dtype, device=x.device))


def tril(input, diagonal=0):
    """The lower triangle of the last two dims (col - row <= diagonal), zeros above."""
    return _triangle(input, diagonal, "tril", lambda offset, k: offset <= k)


def triu(input, diagonal=0):
    """The upper triangle of the last two dims (col - row >= diagonal), zeros below."""
    return _triangle(input, diagonal, "triu", lambda offset, k: offset >= k)


def diag(input, diagonal=0):
    """1-D input: a square matrix with it on the given diagonal; 2-D input: that diagonal as 1-D."""
    x = _tensor(input, "diag")
    k = int(diagonal)
    if x.dim() == 1:
        n = x.shape[0]
        m = n + abs(k)
        padded = _core.cat([x, _core.zeros(abs(k), dtype=x.dtype, device=x.device)], 0)
        values = padded.reshape(m, 1).expand(m, m) if k >= 0 else padded.reshape(1, m).expand(m, m)
        offset = _core.arange(m, device=x.device).reshape(1, m) - _core.arange(m, device=x.device).reshape(m, 1)
        return _core.where(offset == k, values, _core.zeros((), dtype=x.dtype, device=x.device))
    if x.dim() == 2:
        return diagonal_of_last_two(x, k)
    raise _core.ShapeError(f"diag: expected a 1-D or 2-D tensor, got shape {tuple(x.shape)}")


def diagonal_of_last_two(x, k=0):
    """The k-th diagonal of the last two dims, (..., rows, cols) -> (..., length): every
    (cols + 1)-th entry of the flattened matrices, selected (no product with an identity, so an
    infinite entry off the diagonal stays out of it)."""
    rows, cols = x.shape[-2], x.shape[-1]
    length = builtins.max(0, builtins.min(rows, cols - k) if k >= 0 else builtins.min(rows + k, cols))
    start = k if k >= 0 else -k * cols
    at = _core.arange(start, start + length * (cols + 1), cols + 1, dtype=_core.int64, device=x.device)
    return _core.index_select(x.reshape(*x.shape[:-2], rows * cols), x.dim() - 2, at)


def outer(input, vec2):
    """input[i] * vec2[j] for two 1-D tensors."""
    a, b = _tensor(input, "outer"), _tensor(vec2, "outer", "vec2")
    if a.dim() != 1 or b.dim() != 1:
        raise _core.ShapeError(f"outer: expected two 1-D tensors, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


def roll(input, shifts, dims=None):
    """Rotates elements along dims by shifts (ints or matching tuples); without dims, the flattened
    tensor, reshaped back."""
    x = _tensor(input, "roll")
    if dims is None:
        if not isinstance(shifts, int):
            raise _core.InvalidArgumentError("roll: without dims, shifts must be one int")
        return roll(x.reshape(-1), shifts, 0).reshape(*x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise _core.InvalidArgumentError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    for s, d in zip(shifts, dims):
        if not -x.dim() <= d < builtins.max(x.dim(), 1):
            raise _core.IndexOutOfRangeError(f"roll: dim {d} is out of range for a tensor of {x.dim()} dimension(s)")
        n = x.shape[d]
        s = s % n if n else 0
        if s:
            x = _core.cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)
    return x


def lerp(input, end, weight):
    """input + weight * (end - input), PyTorch's two-sided form (exact at weight 0 and 1)."""
    a, b = _tensor(input, "lerp"), _tensor(end, "lerp", "end")
    if isinstance(weight, Tensor):
        return _core.where(weight.abs() < 0.5, a + weight * (b - a), b - (b - a) * (1 - weight))
    return a + weight * (b - a) if abs(weight) < 0.5 else b - (b - a) * (1 - weight)


def bmm(input, mat2):
    """Batched matrix product of (b, n, m) and (b, m, p) tensors."""
    a, b = _tensor(input, "bmm"), _tensor(mat2, "bmm", "mat2")
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise _core.ShapeError(f"bmm: expected (b, n, m) and (b, m, p), got {tuple(a.shape)} and {tuple(b.shape)}")
    return _core.matmul(a, b)


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids of 1-D tensors: 'ij' (matrix) or 'xy' (Cartesian: the first two swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise _core.InvalidArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for i, t in enumerate(tensors):
        if _tensor(t, "meshgrid", f"tensor {i}").dim() != 1:
            raise _core.ShapeError(f"meshgrid: tensor {i} has shape {tuple(t.shape)}; expected 1-D tensors")
    order = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        order[0], order[1] = 1, 0
    shape = [tensors[i].shape[0] for i in order]
    out = []
    for i, t in enumerate(tensors):
        view = [1] * len(tensors)
        view[order.index(i)] = t.shape[0]
        out.append(t.reshape(*view).expand(*shape))
    return tuple(out)


def unbind(input, dim=0):
    """The slices along dim, as a tuple of views without that dim."""
    x = _tensor(input, "unbind")
    if not -x.dim() <= dim < x.dim():
        raise _core.IndexOutOfRangeError(f"unbind: dim {dim} is out of range for a tensor of {x.dim()} dimension(s)")
    return tuple(x.narrow(dim, i, 1).squeeze(dim) for i in range(x.shape[dim]))


def masked_select(input, mask):
    """The elements where the (broadcast) bool mask is True, as a 1-D tensor."""
    x, m = _tensor(input, "masked_select"), _tensor(mask, "masked_select", "mask")
    if m.dtype != _core.bool:
        raise _core.DTypeError(f"masked_select: mask must be bool, got {m.dtype!r}")
    ndim = builtins.max(x.dim(), m.dim())
    sx, sm = [1] * (ndim - x.dim()) + list(x.shape), [1] * (ndim - m.dim()) + list(m.shape)
    if builtins.any(p != q and 1 not in (p, q) for p, q in zip(sx, sm)):
        raise _core.ShapeError(f"masked_select: shapes {tuple(x.shape)} and {tuple(m.shape)} do not broadcast")
    shape = [builtins.max(p, q) for p, q in zip(sx, sm)]
    return x.reshape(*sx).expand(*shape)[m.reshape(*sm).expand(*shape)]


def bernoulli(input):
    """1 where a uniform draw falls below the probability input holds, else 0 (input's dtype):
    Philox draws, so fg.manual_seed reproduces them on every device. Probabilities outside [0, 1]
    act as 0 or 1, NaN as 0."""
    p = _tensor(input, "bernoulli")
    if not _floating(p):
        raise _core.DTypeError(f"bernoulli: expected floating probabilities, got {p.dtype!r}")
    return (_core.rand(*p.shape, dtype=p.dtype, device=p.device) < p).to(dtype=p.dtype)


def multinomial(input, num_samples, replacement=False):
    """Indices drawn from the categories of the last dim with probabilities proportional to input's
    non-negative weights (1-D: (num_samples,); 2-D: one row of draws per row), int64. Without
    replacement: Gumbel top-k (distinct indices, no zero-weight one); with: the inverse of the
    running sum. The weights are checked first (one host read)."""
    w = _tensor(input, "multinomial")
    if not _floating(w):
        raise _core.DTypeError(f"multinomial: expected floating weights, got {w.dtype!r}")
    if w.dim() not in (1, 2) or w.shape[-1] == 0:
        raise _core.ShapeError(f"multinomial: expected weights of shape (n,) or (rows, n) with n > 0, got {tuple(w.shape)}")
    k = int(num_samples)
    rows = w.reshape(-1, w.shape[-1])
    with no_grad():  # one host read: the bad weights and the fewest positive ones in a row
        positive = (rows > 0).sum(1)
        fewest = positive.amin(None) if rows.shape[0] else _core.ones((), dtype=_core.int64, device=w.device)
        bad, nonzero = _core.stack([(~isfinite(rows) | (rows < 0)).sum(), fewest]).tolist()
    if bad or nonzero == 0:
        raise _core.InvalidArgumentError("multinomial: weights must be finite and non-negative, with a positive sum "
                                         "in every row")
    if k <= 0 or (not replacement and k > nonzero):
        raise _core.InvalidArgumentError(
            f"multinomial: cannot draw {num_samples} samples " + ("" if k <= 0 else
            f"without replacement from a row with {nonzero} categories of positive weight"))
    n = rows.shape[1]
    u = _core.rand(rows.shape[0], k if replacement else n, dtype=_core.float64, device=w.device)
    with no_grad():
        if not replacement:  # keys log(w) + Gumbel noise; the k largest are a draw without replacement
            keys = _core.log(rows.to(dtype=_core.float64)) - _core.log(-_core.log(u))
            drawn = _core.topk(keys, k, 1).indices
        else:
            cdf = _core.cumsum(rows.to(dtype=_core.float64), 1)
            target = u * cdf.narrow(1, n - 1, 1)
            drawn = (cdf.reshape(rows.shape[0], 1, n) <= target.reshape(rows.shape[0], k, 1)).sum(2).clamp(max=n - 1)
    return drawn.reshape(k) if w.dim() == 1 else drawn


def inference_mode(mode=True):
    """PyTorch's inference_mode as flowgrad has it: no_grad (mode=False: enable_grad); a context
    manager and a decorator."""
    return no_grad() if mode else enable_grad()


class _Linalg:
    """fg.linalg: vector and matrix norms composed from ops."""

    @staticmethod
    def vector_norm(x, ord=2, dim=None, keepdim=False):
        """The ord-norm over dim (all dims when None): ord 2 (default), 1, any p >= 1, inf, -inf
        or 0 (the count of nonzeros). Its gradient at the origin is 0, not NaN."""
        x = _tensor(x, "vector_norm")
        if not _floating(x):
            raise _core.DTypeError(f"vector_norm: expected a floating tensor, got {x.dtype!r}")
        dims = None if dim is None else ([dim] if isinstance(dim, int) else list(dim))
        if ord == math.inf or ord == -math.inf:
            a = x.abs()
            return a.amax(dims, keepdim) if ord > 0 else a.amin(dims, keepdim)
        if ord == 0:
            return (x != 0).sum(dims, keepdim).to(dtype=x.dtype)
        if not isinstance(ord, (int, float)) or ord < 1:
            raise _core.InvalidArgumentError(f"vector_norm: ord must be 0, inf, -inf or a number >= 1, got {ord!r}")
        if ord == 1:
            return x.abs().sum(dims, keepdim)
        total = (x * x).sum(dims, keepdim) if ord == 2 else (x.abs() ** ord).sum(dims, keepdim)
        positive = total > 0  # the root's derivative is infinite at 0: take it of 1 there, times 0
        root = _core.where(positive, total, _core.ones((), dtype=x.dtype, device=x.device))
        return (root.sqrt() if ord == 2 else root ** (1.0 / ord)) * positive.to(dtype=x.dtype)

    @staticmethod
    def norm(x, ord=None, dim=None, keepdim=False):
        """ord None: the 2-norm of the flattened tensor (over dim when given); 'fro' over two dims;
        a number: vector_norm. Spectral and nuclear norms need an SVD flowgrad does not have."""
        if ord is None or ord == "fro":
            return _Linalg.vector_norm(x, 2, dim, keepdim)
        if isinstance(ord, str):
            raise _core.InvalidArgumentError(f"norm: ord {ord!r} needs a singular value decomposition, "
                                             "which flowgrad does not have; use 'fro' or a vector ord")
        return _Linalg.vector_norm(x, ord, dim, keepdim)


linalg = _Linalg()


def _tensor_norm(self, p="fro", dim=None, keepdim=False):
    """The p-norm over dim (all dims when None): 'fro' or 2, 1, any p >= 1, inf, -inf, 0."""
    return _Linalg.vector_norm(self, 2 if p == "fro" else p, dim, keepdim)


def _new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    """A tensor of size filled with fill_value, with self's dtype and device unless given."""
    t = _core.full(tuple(size), fill_value, dtype=dtype or self.dtype, device=device or self.device)
    return t.requires_grad_(True) if requires_grad else t


def _new(fill):
    def make(self, *size, dtype=None, device=None, requires_grad=False):
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else size
        return _new_full(self, size, fill, dtype, device, requires_grad)
    return make


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    """A tensor of data (copied) with self's dtype and device unless given."""
    t = _core.tensor(data, dtype=dtype or self.dtype).to(device or self.device)
    return t.requires_grad_(True) if requires_grad else t


_new_zeros, _new_ones = _new(0), _new(1)
_new_zeros.__doc__ = "Zeros of the given size with self's dtype and device unless given."
_new_ones.__doc__ = "Ones of the given size with self's dtype and device unless given."

for _name, _fn in [("any", any), ("all", all), ("isnan", isnan), ("isinf", isinf), ("isfinite", isfinite),
                   ("isclose", isclose), ("allclose", allclose), ("tril", tril), ("triu", triu), ("diag", diag),
                   ("outer", outer), ("roll", roll), ("lerp", lerp), ("bmm", bmm), ("unbind", unbind),
                   ("masked_select", masked_select), ("norm", _tensor_norm), ("new_zeros", _new_zeros),
                   ("new_ones", _new_ones), ("new_empty", _new_zeros), ("new_full", _new_full),
                   ("new_tensor", _new_tensor), ("bernoulli", bernoulli), ("multinomial", multinomial)]:
    setattr(Tensor, _name, _fn)
Tensor.type_as = lambda self, other: self.to(dtype=_tensor(other, "type_as", "other").dtype)
Tensor.type_as.__doc__ = "self converted to other's dtype."
