"""fg.autograd: functional gradients and anomaly detection."""
from . import _core

__all__ = ["grad", "detect_anomaly", "backward"]


def grad(outputs, inputs, grad_outputs=None, retain_graph=False, create_graph=False, allow_unused=False):
    """Gradients of outputs with respect to inputs, returned as a tuple; .grad is untouched.

    With create_graph=True the gradients are themselves differentiable (second order).
    """
    single = isinstance(inputs, _core.Tensor)
    outputs = [outputs] if isinstance(outputs, _core.Tensor) else list(outputs)
    inputs = [inputs] if single else list(inputs)
    if isinstance(grad_outputs, _core.Tensor):
        grad_outputs = [grad_outputs]
    return tuple(_core.grad(outputs, inputs, grad_outputs, retain_graph or create_graph,
                            create_graph, allow_unused))


def backward(tensors, grad_tensors=None, retain_graph=False, create_graph=False):
    """Accumulates gradients of several outputs into the leaves' .grad."""
    tensors = [tensors] if isinstance(tensors, _core.Tensor) else list(tensors)
    grads = grad_tensors or [None] * len(tensors)
    for t, g in zip(tensors, grads):
        t.backward(g, retain_graph=True if len(tensors) > 1 else retain_graph, create_graph=create_graph)


class detect_anomaly:
    """Inside this block every op output and gradient is checked for NaN/Inf; the first one
    raises fg.InvalidArgumentError naming the op (forward) or the op whose backward made it.
    Every floating dtype on every device is checked (one reduction and one host read per
    tensor: on CUDA each check synchronises, as a debugging mode may). Like fg.no_grad it holds
    for this thread, and for the parallel branches of the graphs it calls."""

    def __enter__(self):
        self._previous = _core.is_anomaly_enabled()
        _core.set_anomaly_enabled(True)
        return self

    def __exit__(self, *exc):
        _core.set_anomaly_enabled(self._previous)
        return False
