"""fg.nn.utils: gradient clipping."""
from .. import _core

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(parameters, max_norm):
    """Scales the gradients of `parameters` so that their global L2 norm is at most max_norm.

    Returns the norm before clipping as a 0-d float32 tensor. Gradients are replaced, never
    modified in place.
    """
    params = [parameters] if isinstance(parameters, _core.Tensor) else list(parameters)
    return _core.tensor(_core.optim.clip_grad_norm(params, float(max_norm)))
