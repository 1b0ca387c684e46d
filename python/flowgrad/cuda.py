"""fg.cuda: GPU availability, streams and events, and the caching allocator's memory statistics.

Streams follow PyTorch: each thread has a current stream per GPU (the default stream until
``with fg.cuda.stream(s):`` makes another current); kernels, cuBLAS calls and copies go to it.

Tensors move with t.to("cuda") / t.cuda() / t.cpu() and modules with m.to("cuda"); kernels for
the ops on CUDA tensors arrive with the rest of the CUDA backend."""
from . import _core
from . import amp  # fg.cuda.amp.GradScaler / fg.cuda.amp.autocast, as in torch.cuda.amp

_rt = _core.cuda_runtime

__all__ = ["is_available", "device_count", "synchronize", "built_with_cuda", "unavailable_reason", "memory_stats",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "reset_peak_memory_stats", "empty_cache",
           "set_allow_tf32", "allow_tf32", "Stream", "Event", "stream", "StreamContext", "current_stream",
           "default_stream", "set_stream", "sync_count", "manual_seed", "manual_seed_all"]

Stream = _rt.Stream
Event = _rt.Event
current_stream = _rt.current_stream
default_stream = _rt.default_stream
set_stream = _rt.set_stream


class StreamContext:
    """Makes a stream current on its device for the ``with`` block and restores the previous one.
    ``None`` is accepted and does nothing (as in PyTorch)."""

    def __init__(self, stream):
        self.stream = stream
        self._previous = None

    def __enter__(self):
        if self.stream is not None:
            self._previous = current_stream(self.stream.device)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self._previous is not None:
            set_stream(self._previous)
        return False


def stream(s):
    """``with fg.cuda.stream(s):`` queues the block's CUDA work on stream `s` (None: no change)."""
    return StreamContext(s)


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


def sync_count():
    """How many times this thread's host has waited for the GPU: every ``.item()``, ``.numpy()``,
    copy to the host, stream, event or device synchronize counts one. Take the difference around
    a block of code to check that it never waits (a captured training step should not). 0 without
    a GPU; ``step.stats["host_syncs"]`` gives the count of a compiled step's last call."""
    return _rt.sync_count()


def _index(device):
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    d = _core.device(device) if isinstance(device, str) else device
    if d.type != "cuda":
        raise _core.DeviceError(f"fg.cuda: expected a CUDA device, got {d}")
    return d.index or 0


def memory_stats(device=None):
    """The caching allocator's statistics for a GPU: allocated/reserved bytes (and peaks),
    segments, live allocations, backend allocations, out-of-memory retries, and deferred frees
    (freed blocks waiting for the work of streams named by ``Tensor.record_stream``)."""
    return _rt.memory_stats(_index(device))


def memory_allocated(device=None):
    """Bytes held by live CUDA tensors on the device (0 without a GPU)."""
    return memory_stats(device)["allocated_bytes"]


def max_memory_allocated(device=None):
    """The peak of memory_allocated since start or reset_peak_memory_stats()."""
    return memory_stats(device)["peak_allocated_bytes"]


def memory_reserved(device=None):
    """Bytes the caching allocator holds from the driver (live tensors plus its cache)."""
    return memory_stats(device)["reserved_bytes"]


def reset_peak_memory_stats(device=None):
    """Restarts max_memory_allocated from the current value."""
    _rt.reset_peak_memory_stats(_index(device))


def empty_cache():
    """Returns cached, unused GPU memory to the driver (live tensors are untouched)."""
    _rt.empty_cache()


def set_allow_tf32(on):
    """Lets float32 CUDA matmuls use TF32 tensor cores: faster, about 1e-3 relative precision.
    Off by default, so float32 matmuls keep full float32 precision."""
    _rt.set_allow_tf32(bool(on))


def allow_tf32():
    """Whether float32 CUDA matmuls may use TF32 tensor cores."""
    return _rt.allow_tf32()


def manual_seed(seed):
    """Seeds flowgrad's one generator (fg.manual_seed). Its Philox draws give the same numbers on
    every device, so unlike torch.cuda.manual_seed this also reseeds CPU draws."""
    _core.manual_seed(seed)


def manual_seed_all(seed):
    """fg.manual_seed(seed): one generator serves every GPU (and the CPU)."""
    _core.manual_seed(seed)
