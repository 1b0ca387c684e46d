"""fg.cuda: GPU availability. Kernels for CUDA tensors arrive with the CUDA backend."""
from . import _core

_rt = _core.cuda_runtime

__all__ = ["is_available", "device_count", "synchronize", "built_with_cuda", "unavailable_reason"]


def built_with_cuda():
    """True when this build compiled the CUDA kernels (nvcc was found at build time)."""
    return _rt.built_with_cuda()


def device_count():
    """Number of visible GPUs; 0 without a driver or device."""
    return _rt.device_count()


def is_available():
    """True when a GPU can be used. FLOWGRAD_DEBUG=1 prints why not when it cannot."""
    available = _rt.device_count() > 0
    if not available and _core._debug_level() >= 1:
        print(f"flowgrad: CUDA unavailable: {_rt.unavailable_reason()}")
    return available


def unavailable_reason():
    """Why no GPU can be used ('' when one can)."""
    return _rt.unavailable_reason()


def synchronize():
    """Waits for all queued GPU work (a no-op without a GPU)."""
    _rt.synchronize()

