"""
Process group and collectives (the fg.distributed module wraps this).
"""
from __future__ import annotations
import collections.abc
import flowgrad._core
import typing
__all__: list[str] = ['Reducer', 'Work', 'abort', 'all_gather', 'all_reduce', 'all_reduce_', 'backend', 'barrier', 'broadcast', 'built_with_mpi', 'destroy', 'init', 'is_initialized', 'rank', 'reduce_scatter', 'world_size']
class Reducer:
    """
    Averages gradients in buckets during backward (used by DistributedDataParallel).
    """
    def __init__(self, params: collections.abc.Sequence[flowgrad._core.Tensor], names: collections.abc.Sequence[str], bucket_bytes: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def prepare_for_backward(self, outputs: typing.Any, find_unused: bool) -> None:
        """
        Arms the gradient hooks for the next backward.
        """
    @property
    def bucket_indices(self) -> list[list[int]]:
        """
        Parameter indices of each bucket, in launch order.
        """
class Work:
    """
    An issued collective (returned with async_op=True).
    """
    def is_completed(self) -> bool:
        """
        True once the transport has finished.
        """
    def wait(self) -> None:
        """
        Blocks until the result is in the output tensor; raises the transport's error.
        """
def abort(code: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Ends every process of the job at once (MPI_Abort / ncclCommAbort, then exit).
    """
def all_gather(output: flowgrad._core.Tensor, input: flowgrad._core.Tensor) -> Work:
    """
    Issues an all-gather of every rank's input into output, in rank order.
    """
def all_reduce(tensor: flowgrad._core.Tensor, op: str = 'sum', blocking: bool = False) -> Work:
    """
    Issues an in-place all-reduce ('sum', 'avg', 'max', 'min'); blocking=True when the caller waits at once (then it runs on the caller's thread if the communication thread is idle).
    """
def all_reduce_(tensor: flowgrad._core.Tensor, op: str = 'sum') -> flowgrad._core.Tensor:
    """
    All-reduces tensor in place through the op registry and returns it once done; compiled steps record it as an instruction.
    """
def backend() -> str:
    """
    'mpi' or 'nccl'.
    """
def barrier() -> Work:
    """
    Issues a barrier.
    """
def broadcast(tensor: flowgrad._core.Tensor, src: typing.SupportsInt | typing.SupportsIndex) -> Work:
    """
    Issues an in-place broadcast of rank src's tensor.
    """
def built_with_mpi() -> bool:
    """
    True when this build can open MPI (CMake found mpi.h).
    """
def destroy() -> None:
    """
    Waits for pending collectives and closes the process group.
    """
def init(backend: str, nccl_library_dirs: collections.abc.Sequence[str] = []) -> None:
    """
    Opens the process group on 'mpi' or 'nccl' (DeviceError naming what is missing).
    """
def is_initialized() -> bool:
    """
    True between init() and destroy().
    """
def rank() -> int:
    """
    This process's rank in the group.
    """
def reduce_scatter(output: flowgrad._core.Tensor, input: flowgrad._core.Tensor, op: str = 'sum') -> Work:
    """
    Issues a reduction of input whose block number rank lands in output.
    """
def world_size() -> int:
    """
    Number of processes in the group.
    """
