"""fg.nn.init: in-place initialisers, seeded by fg.manual_seed (computed in C++; trunc_normal_
composed from ops; orthogonal_ from normal draws and a host QR)."""
import math

import numpy as np

from .. import _core
from .._grad_mode import no_grad
from .._core.init import (  # noqa: F401
    uniform_, normal_, zeros_, ones_, constant_, calculate_gain, xavier_uniform_, xavier_normal_,
    kaiming_uniform_, kaiming_normal_,
)

__all__ = ["uniform_", "normal_", "zeros_", "ones_", "constant_", "calculate_gain", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "orthogonal_"]


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Fills tensor in place with a normal(mean, std) truncated to [a, b] (absolute bounds, as in
    PyTorch), by inverting the normal's CDF over the allowed range: uniform draws (Philox, float64)
    through erfinv, then clamped to [a, b]. Returns tensor."""
    if not isinstance(tensor, _core.Tensor):
        raise TypeError(f"trunc_normal_: expected an fg.Tensor, got {type(tensor).__name__}")
    if not std > 0 or not a < b:
        raise _core.InvalidArgumentError(f"trunc_normal_: need std > 0 and a < b, got std={std}, a={a}, b={b}")

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    with no_grad():
        u = _core.rand(*tensor.shape, dtype=_core.float64, device=tensor.device)
        z = _core.erfinv(u * (2 * hi - 2 * lo) + (2 * lo - 1)) * (std * math.sqrt(2.0)) + mean
        tensor.copy_(z.clamp(a, b))
    return tensor


def orthogonal_(tensor, gain=1.0):
    """Fills tensor (2-D or more, trailing dims flattened) in place with a (semi-)orthogonal matrix
    times gain, PyTorch's recipe: normal draws (Philox, so fg.manual_seed reproduces them), their
    QR decomposition with R's diagonal made positive. The QR runs once, on the host, in NumPy's
    LAPACK (float64). Returns tensor."""
    if not isinstance(tensor, _core.Tensor):
        raise TypeError(f"orthogonal_: expected an fg.Tensor, got {type(tensor).__name__}")
    if tensor.dim() < 2:
        raise _core.ShapeError(f"orthogonal_: expected a tensor of at least 2 dims, got shape {tuple(tensor.shape)}")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    if tensor.numel() == 0:
        return tensor
    with no_grad():
        draws = _core.randn(rows, cols, dtype=_core.float64).numpy()
        flat = draws.T if rows < cols else draws
        q, r = np.linalg.qr(flat)
        q = q * np.sign(np.diag(r))
        q = q.T if rows < cols else q
        tensor.copy_(_core.tensor(q * gain, dtype=tensor.dtype, device=tensor.device).reshape(*tensor.shape))
    return tensor
