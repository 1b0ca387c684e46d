"""
CUDA availability (the fg.cuda module wraps this).
"""
from __future__ import annotations
__all__: list[str] = ['built_with_cuda', 'device_count', 'synchronize', 'unavailable_reason']
def built_with_cuda() -> bool:
    """
    True when this build compiled the CUDA kernels.
    """
def device_count() -> int:
    """
    Number of visible GPUs (0 without a driver).
    """
def synchronize() -> None:
    """
    Waits for all queued GPU work.
    """
def unavailable_reason() -> str:
    """
    Why no GPU can be used ('' when one can).
    """
