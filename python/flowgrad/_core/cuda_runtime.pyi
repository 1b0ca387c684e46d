"""
CUDA availability (the fg.cuda module wraps this).
"""
from __future__ import annotations
import typing
__all__: list[str] = ['allow_tf32', 'built_with_cuda', 'device_count', 'empty_cache', 'memory_stats', 'reset_peak_memory_stats', 'set_allow_tf32', 'synchronize', 'unavailable_reason']
def allow_tf32() -> bool:
    """
    Whether float32 CUDA matmuls may use TF32.
    """
def built_with_cuda() -> bool:
    """
    True when this build compiled the CUDA kernels.
    """
def device_count() -> int:
    """
    Number of visible GPUs (0 without a driver).
    """
def empty_cache() -> None:
    """
    Returns cached, unused GPU memory to the driver.
    """
def memory_stats(device: typing.SupportsInt | typing.SupportsIndex) -> dict:
    """
    The caching allocator's statistics for one GPU (zeros without CUDA).
    """
def reset_peak_memory_stats(device: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Restarts the peak statistics from the current values.
    """
def set_allow_tf32(on: bool) -> None:
    """
    Lets float32 CUDA matmuls use TF32 tensor cores (faster, ~1e-3 relative precision). Off by default.
    """
def synchronize() -> None:
    """
    Waits for all queued GPU work.
    """
def unavailable_reason() -> str:
    """
    Why no GPU can be used ('' when one can).
    """
