"""fg.accelerator: PyTorch's device-agnostic view of the machine's accelerator, which for flowgrad
is CUDA when a GPU is usable."""
from . import _core, cuda

__all__ = ["is_available", "current_accelerator", "device_count", "synchronize"]


def is_available():
    """Whether a GPU can be used."""
    return cuda.is_available()


def current_accelerator(check_available=False):
    """fg.device('cuda') when this build has CUDA kernels (and, with check_available, a GPU can be
    used), else None: scripts then fall back to the CPU."""
    if not cuda.built_with_cuda() or (check_available and not cuda.is_available()):
        return None
    return _core.device("cuda")


def device_count():
    """The number of usable GPUs (0 without one)."""
    return cuda.device_count()


def synchronize(device=None):
    """Waits for the GPU's queued work (nothing to wait for without one)."""
    cuda.synchronize()
