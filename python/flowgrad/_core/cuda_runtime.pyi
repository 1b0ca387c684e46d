"""
CUDA availability (the fg.cuda module wraps this).
"""
from __future__ import annotations
import typing
__all__: list[str] = ['Event', 'Stream', 'allow_tf32', 'built_with_cuda', 'current_stream', 'default_stream', 'device_count', 'empty_cache', 'memory_stats', 'reset_peak_memory_stats', 'set_allow_tf32', 'set_stream', 'synchronize', 'unavailable_reason']
class Event:
    """
    A CUDA event: marks a point in a stream's work; other streams can wait for it, the host can wait for it, and two timing events measure the GPU time between them.
    """
    def __init__(self, enable_timing: bool = False, device: typing.Any = None) -> None:
        """
        A new event; enable_timing=True lets elapsed_time measure it.
        """
    def elapsed_time(self, end_event: Event) -> float:
        """
        Milliseconds of GPU time between this event and `end_event` (both recorded, enable_timing=True).
        """
    def query(self) -> bool:
        """
        True when the work before the event has finished.
        """
    def record(self, stream: Stream | None = None) -> None:
        """
        Records the event on a stream (default: the current stream).
        """
    def synchronize(self) -> None:
        """
        Waits until the work before the event has finished.
        """
    def wait(self, stream: Stream | None = None) -> None:
        """
        Makes a stream (default: the current stream) wait for the event.
        """
    @property
    def device(self) -> typing.Any:
        """
        The event's device.
        """
class Stream:
    """
    A CUDA stream: kernels queued on one stream run in order; different streams may overlap. Make it current with `with fg.cuda.stream(s):`.
    """
    def __init__(self, device: typing.Any = None, priority: typing.SupportsInt = 0) -> None:
        """
        A new stream on a CUDA device (lower priority numbers run first).
        """
    def query(self) -> bool:
        """
        True when all work queued on the stream has finished.
        """
    def record_event(self, event: Event | None = None) -> Event:
        """
        Records an event (a new one when None) on the stream and returns it.
        """
    def synchronize(self) -> None:
        """
        Waits until all work queued on the stream has finished.
        """
    def wait_event(self, event: Event) -> None:
        """
        Work queued on this stream from now on waits for the event.
        """
    def wait_stream(self, stream: Stream) -> None:
        """
        Work queued on this stream from now on waits for the work queued on `stream` so far.
        """
    @property
    def cuda_stream(self) -> int:
        """
        The raw cudaStream_t as an integer (0: the legacy default stream).
        """
    @property
    def device(self) -> typing.Any:
        """
        The stream's device.
        """
def allow_tf32() -> bool:
    """
    Whether float32 CUDA matmuls may use TF32.
    """
def built_with_cuda() -> bool:
    """
    True when this build compiled the CUDA kernels.
    """
def current_stream(device: typing.Any = None) -> Stream:
    """
    This thread's current stream on a CUDA device (the default stream unless set).
    """
def default_stream(device: typing.Any = None) -> Stream:
    """
    The legacy default stream of a CUDA device.
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
def set_stream(stream: Stream) -> None:
    """
    Makes `stream` this thread's current stream on its device (prefer the fg.cuda.stream context manager).
    """
def synchronize() -> None:
    """
    Waits for all queued GPU work.
    """
def unavailable_reason() -> str:
    """
    Why no GPU can be used ('' when one can).
    """
