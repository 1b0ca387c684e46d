"""fg.nn.init: in-place initialisers, seeded by fg.manual_seed (computed in C++; trunc_normal_
composed from ops)."""
import math

from .. import _core
from .._grad_mode import no_grad
from .._core.init import (  # noqa: F401
    uniform_, normal_, zeros_, ones_, constant_, calculate_gain, xavier_uniform_, xavier_normal_,
    kaiming_uniform_, kaiming_normal_,
)

__all__ = ["uniform_", "normal_", "zeros_", "ones_", "constant_", "calculate_gain", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_"]


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
