"""fg.nn.parallel: DistributedDataParallel, data-parallel training over fg.distributed."""
import contextlib

from .. import _core
from .._grad_mode import is_grad_enabled, no_grad
from .._core import distributed as _d

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(_core.Module):
    """Wraps a module so that every rank trains the same model on its own shard of the data.

    At wrap time rank 0's parameters and buffers are broadcast to every rank. During backward,
    gradients are averaged over ranks in buckets of about bucket_mb megabytes, each started as
    soon as its gradients are final and reduced while the rest of backward runs; once the last
    bucket has started, backward waits for them all and returns with every .grad averaged. Parameters that a forward does not use (an untaken switch branch)
    need find_unused_parameters=True. Inside `with ddp.no_sync():` gradients only accumulate
    locally; the next synchronised backward averages the accumulated sum.

    ``fg.compile(ddp, loss_fn, optimizer, example_inputs=...)`` compiles the whole step, the
    gradient average included: per bucket, a start instruction right after the bucket's last
    gradient is computed and a wait before the first read of the average, so the all-reduce
    overlaps the rest of the backward there too. A step compiled or called inside ``no_sync()`` is traced without the
    all-reduce (its gradients stay local); called outside it again, the step is traced again.
    """

    def __init__(self, module, bucket_mb=25, find_unused_parameters=False):
        super().__init__()
        if not _d.is_initialized():
            raise _core.InvalidArgumentError("DistributedDataParallel: call fg.distributed.init() first")
        if bucket_mb <= 0:
            raise _core.InvalidArgumentError(f"DistributedDataParallel: bucket_mb must be positive, got {bucket_mb}")
        self.module = module
        self.find_unused_parameters = find_unused_parameters
        named = module.named_parameters()
        with no_grad():
            for t in [p for _, p in named] + module.buffers():
                _d.broadcast(t, 0).wait()
        self._reducer_params = [p for _, p in named]
        self._reducer = _d.Reducer(self._reducer_params, [n for n, _ in named], max(1, int(bucket_mb * 2**20)))
        self._sync = True

    def forward(self, *args, **kwargs):
        out = self.module(*args, **kwargs)
        if self._sync and is_grad_enabled():
            self._reducer.prepare_for_backward(out, self.find_unused_parameters)
        return out

    @contextlib.contextmanager
    def traced_sync(self):
        """For compiling a step (fg.compile uses it): a block to trace the step in, yielding
        ``average(params, grads) -> grads``. Inside it the forward arms no backward hooks (so
        ``autograd.grad`` leaves .grad alone), and `average` returns the gradients averaged over
        ranks by registry ops a tracer records, the C++ average the eager reducer runs too: per
        bucket, the gradients packed into one flat tensor and its in-place all-reduce ('avg')
        started; then per bucket its wait and views of the result. A None gradient stays None (its parameter adds zeros to its bucket). Inside ``no_sync()``
        `average` returns the gradients as they are: no all-reduce is traced."""
        previous, self._sync = self._sync, False
        try:
            yield self._reducer.average if previous else _local
        finally:
            self._sync = previous

    @property
    def syncs_gradients(self):
        """False inside ``no_sync()``: backward, and a step compiled there, leave gradients local."""
        return self._sync

    @contextlib.contextmanager
    def no_sync(self):
        """Within this block, backward accumulates gradients without averaging them."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous


def _local(params, grads):
    return grads


