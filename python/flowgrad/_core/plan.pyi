"""
Compiled plans: tracer, instructions, memory plan, executor (used by fg.compile).
"""
from __future__ import annotations
import collections.abc
import typing
import flowgrad._core
__all__: list[str] = ['Plan', 'Tracer', 'compile_ptx', 'nvrtc_available', 'restore', 'snapshot']
class Plan:
    """
    A traced step as instructions over planned memory.
    """
    def __init__(self, tracer: Tracer, inputs: collections.abc.Sequence[flowgrad._core.Tensor], outputs: collections.abc.Sequence[flowgrad._core.Tensor], grads: collections.abc.Sequence[tuple[flowgrad._core.Tensor, flowgrad._core.Tensor]], names: collections.abc.Sequence[tuple[str, flowgrad._core.Tensor]], watch: collections.abc.Sequence[flowgrad._core.Tensor]) -> None:
        """
        Builds a plan from a finished trace: inputs are copied into slots each run, outputs returned, each (parameter, gradient) pair bound to the parameter's .grad; watched tensors must keep their storage.
        """
    def buffers(self) -> list:
        """
        Every buffer with its kind, bytes, arena offset, lifetime [first, last] in instructions, and whether it is local to a fused run.
        """
    def capture_blocker(self, device: typing.Any = None) -> str:
        """
        Why the plan would not be captured into a CUDA graph on `device` (default: its own), decided on the host before any attempt; '' when capture would be tried.
        """
    def check_memory(self) -> None:
        """
        Raises unless no two buffers alive at the same time share arena bytes.
        """
    def dot(self) -> str:
        """
        The plan as a Graphviz DOT graph.
        """
    def fused_cuda_source(self, run: int) -> tuple:
        """
        (name, source) of the CUDA kernel generated for fused run `run` (CUDA plans compile it with NVRTC).
        """
    def ir(self) -> list:
        """
        The instructions as a list of records (op, inputs, outputs, shape, dtype, attrs, random, branch); a branch instruction's 'branch' holds its kind, the CUDA conditional node it maps to, its selector and its blocks (lists of records).
        """
    def run(self, inputs: collections.abc.Sequence[flowgrad._core.Tensor]) -> list[flowgrad._core.Tensor]:
        """
        Runs the plan on new inputs; returns fresh output tensors.
        """
    def stats(self) -> dict:
        """
        Counts and sizes: instructions, kernels, fused, arena_bytes, naive_bytes, cuda_graph, ...
        """
    def run_profiled(self, inputs: collections.abc.Sequence[flowgrad._core.Tensor]) -> tuple:
        """
        Runs the plan once like run() and also returns each instruction's milliseconds (CPU: host clock; CUDA: timing events inside a captured graph of the step).
        """
    def up_to_date(self) -> bool:
        """
        False once a watched tensor's storage was replaced.
        """
    @property
    def device(self) -> str:
        """
        The plan's device.
        """
class Tracer:
    """
    Records every op call while alive (use as a context manager).
    """
    def __enter__(self) -> Tracer: ...
    def __exit__(self, *args) -> bool: ...
    def mark_backward(self) -> None:
        """
        Marks where the backward pass starts (common-subexpression elimination keeps recomputation there).
        """
    @property
    def calls(self) -> int:
        """
        Number of recorded op calls.
        """
def compile_ptx(source: str, name: str, arch: int) -> str:
    """
    PTX of CUDA source compiled by NVRTC for compute_<arch>.
    """
def nvrtc_available() -> tuple:
    """
    (True, '') when NVRTC can compile fused CUDA kernels here, else (False, why).
    """
def restore(tensors: collections.abc.Sequence[flowgrad._core.Tensor], copies: collections.abc.Sequence[flowgrad._core.Tensor]) -> None:
    """
    Writes copies back into the tensors.
    """
def snapshot(tensors: collections.abc.Sequence[flowgrad._core.Tensor]) -> list[flowgrad._core.Tensor]:
    """
    Copies of the tensors' values.
    """
