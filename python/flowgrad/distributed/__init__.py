"""fg.distributed: data-parallel training across processes and machines.

Collectives run on MPI (CPU tensors; CUDA tensors through host staging) or NCCL (CUDA tensors,
on the current stream); both libraries are opened at init, so flowgrad imports and runs without
them. Launch one process per CPU socket or GPU with

    python -m flowgrad.distributed.run --nproc 4 train.py

and in train.py call fg.distributed.init(), wrap the model in
fg.nn.parallel.DistributedDataParallel and shard the data with fg.data.DistributedSampler.
"""
import atexit
import os
import sys

from .. import _core
from .._core.distributed import Work

__all__ = ["init", "is_initialized", "destroy", "rank", "world_size", "backend", "all_reduce",
           "broadcast", "all_gather", "reduce_scatter", "barrier", "Work"]

_d = _core.distributed


def init(backend="mpi"):
    """Joins the job's process group on 'mpi' or 'nccl'.

    Raises fg.DeviceError naming the missing library (or GPU) and how to install it. After init,
    an exception that reaches the top of any rank ends the whole job (MPI_Abort), so a failing
    rank never leaves the others waiting in a collective (under python -m
    flowgrad.distributed.run, a non-zero exit status too); a rank that waits in a collective
    which a departed rank never made raises an error naming it. Unless FLOWGRAD_NUM_THREADS is
    set, each rank then computes with cores / (ranks on this machine) threads. With 'nccl' and
    several ranks, FLOWGRAD_RENDEZVOUS_TOKEN must hold the job's secret (the launcher sets it).
    """
    _share_the_machine()
    _d.init(backend, _nccl_wheel_dirs() if backend == "nccl" else [])
    if not getattr(sys.excepthook, "_flowgrad_abort", False):
        sys.excepthook = _abort_on_error(sys.excepthook)
    atexit.unregister(destroy)
    atexit.register(destroy)


def _share_the_machine():
    """Ranks on one machine split its cores: unless FLOWGRAD_NUM_THREADS is set, each computes
    with cores / (ranks on this machine) threads, never more than the cores it may run on (mpirun
    binds ranks to cores). Waiting in a collective, MPI yields the core instead of spinning on it
    (OMPI_MCA_mpi_yield_when_idle, unless set): a spinning rank takes the core that the rank it
    waits for needs to arrive, whenever the machine has no idle core."""
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("LOCAL_WORLD_SIZE") or 1)
    cores = os.cpu_count() or 1
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    if not os.environ.get("FLOWGRAD_NUM_THREADS"):
        _core.set_num_threads(max(1, min(allowed, cores // local)))
    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")


def _nccl_wheel_dirs():
    """lib folders of the nvidia-nccl wheel wherever it is installed on sys.path."""
    found = []
    for root in sys.path:
        lib = os.path.join(root or ".", "nvidia", "nccl", "lib")
        if os.path.isfile(os.path.join(lib, "libnccl.so.2")):
            found.append(lib)
    return found


def _abort_on_error(previous):
    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        if _d.is_initialized():
            sys.stderr.write(f"flowgrad.distributed: rank {_d.rank()} failed with {kind.__name__}: "
                             f"{value}; aborting the job\n")
            sys.stderr.flush()
            _d.abort(1)
    hook._flowgrad_abort = True
    return hook


def is_initialized():
    """True between init() and destroy()."""
    return _d.is_initialized()


def destroy():
    """Waits for pending collectives and leaves the process group (also run at exit)."""
    _d.destroy()


def rank():
    """This process's rank, 0 .. world_size() - 1."""
    return _d.rank()


def world_size():
    """The number of processes in the job."""
    return _d.world_size()


def backend():
    """'mpi' or 'nccl'."""
    return _d.backend()


def _finish(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor, op="sum", async_op=False):
    """Reduces tensor in place over all ranks: op is 'sum', 'avg', 'max' or 'min'.

    With async_op=True returns a Work whose wait() returns once the result is in tensor.
    """
    return _finish(_d.all_reduce(tensor, op, blocking=not async_op), async_op)


def broadcast(tensor, src=0, async_op=False):
    """Overwrites tensor on every rank with rank src's tensor."""
    return _finish(_d.broadcast(tensor, src), async_op)


def all_gather(output, input, async_op=False):
    """output (world_size * n, ...) receives every rank's input (n, ...), in rank order."""
    return _finish(_d.all_gather(output, input), async_op)


def reduce_scatter(output, input, op="sum", async_op=False):
    """Reduces input (world_size * n, ...) over ranks; rank r's output (n, ...) gets block r."""
    return _finish(_d.reduce_scatter(output, input, op), async_op)


def barrier(async_op=False):
    """Returns once every rank has reached the barrier."""
    return _finish(_d.barrier(), async_op)
