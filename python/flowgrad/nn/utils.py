"""fg.nn.utils: gradient clipping, and parameters as one flat vector."""
from .. import _core
from .._grad_mode import no_grad

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _listed(parameters):
    return [parameters] if isinstance(parameters, _core.Tensor) else list(parameters)


def clip_grad_norm_(parameters, max_norm):
    """Scales the gradients of `parameters` so that their global L2 norm is at most max_norm.

    Returns the norm before clipping as a 0-d float32 tensor on the gradients' device. Gradients
    are replaced (multiplied by min(1, max_norm / (norm + 1e-6))), never modified in place. The
    norm and the scale stay on the device (no host read), so a compiled step records the clipping.
    """
    return _core.optim.clip_grad_norm(_listed(parameters), float(max_norm))


def clip_grad_value_(parameters, clip_value):
    """Clamps every gradient of `parameters` into [-clip_value, clip_value] (parameters without a
    gradient are skipped). Gradients are replaced, never modified in place."""
    clip_value = float(clip_value)
    if not clip_value >= 0:
        raise _core.InvalidArgumentError(f"clip_grad_value_: clip_value must be >= 0, got {clip_value}")
    with no_grad():
        for p in _listed(parameters):
            if p.grad is not None:
                p.grad = p.grad.clamp(-clip_value, clip_value)


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-D tensor (a copy; differentiable)."""
    params = _listed(parameters)
    if not params:
        raise _core.InvalidArgumentError("parameters_to_vector: no parameters")
    devices = {str(p.device) for p in params}
    if len(devices) > 1:
        raise _core.DeviceError(f"parameters_to_vector: parameters on several devices {sorted(devices)}; "
                                "expected one device")
    return _core.cat([p.reshape(-1) for p in params], 0)


def vector_to_parameters(vec, parameters):
    """Copies consecutive slices of the 1-D tensor `vec` into `parameters`, in place (the inverse of
    parameters_to_vector); `vec` must hold exactly as many elements as the parameters."""
    if not isinstance(vec, _core.Tensor):
        raise TypeError(f"vector_to_parameters: expected a Tensor, got {type(vec).__name__}")
    params = _listed(parameters)
    total = sum(p.numel() for p in params)
    if vec.dim() != 1 or vec.numel() != total:
        raise _core.ShapeError(f"vector_to_parameters: expected a 1-D tensor of {total} elements for "
                               f"{len(params)} parameters, got shape {tuple(vec.shape)}")
    with no_grad():
        at = 0
        for p in params:
            n = p.numel()
            p.copy_(vec[at:at + n].reshape(p.shape))
            at += n
