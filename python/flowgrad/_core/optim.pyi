"""
Fused optimizer update ops over parameter groups (used by fg.optim).
"""
from __future__ import annotations
import collections.abc
import flowgrad._core
import typing
__all__: list[str] = ['ADAM_SLOTS', 'SGD_SLOTS', 'adam_step', 'clip_grad_norm', 'sgd_step', 'write_hyper']
ADAM_SLOTS: tuple = ('lr', 'beta1', 'beta2', 'eps', 'weight_decay', 'decoupled')
SGD_SLOTS: tuple = ('lr', 'momentum', 'dampening', 'weight_decay', 'nesterov', 'first')
def adam_step(params: collections.abc.Sequence[flowgrad._core.Tensor], exp_avgs: collections.abc.Sequence[flowgrad._core.Tensor], exp_avg_sqs: collections.abc.Sequence[flowgrad._core.Tensor], steps: collections.abc.Sequence[flowgrad._core.Tensor], hyper: flowgrad._core.Tensor, foreach: bool = True) -> None:
    """
    One Adam/AdamW step over a group, in place (parameters with a gradient); hyper holds ADAM_SLOTS as float64. foreach: multi-tensor update ops when the parameters share a device and dtype, else one adam_update op per parameter.
    """
def clip_grad_norm(params: collections.abc.Sequence[flowgrad._core.Tensor], max_norm: typing.SupportsFloat | typing.SupportsIndex) -> float:
    """
    Scales gradients to a global L2 norm of at most max_norm; returns the norm before.
    """
def sgd_step(params: collections.abc.Sequence[flowgrad._core.Tensor], momentum_buffers: collections.abc.Sequence[flowgrad._core.Tensor], hyper: flowgrad._core.Tensor, foreach: bool = True) -> None:
    """
    One SGD step over a group (parameters with a gradient); momentum_buffers is empty without momentum; hyper holds SGD_SLOTS as float64. foreach: multi-tensor update ops when the parameters share a device and dtype (few launches, the same numbers), else one sgd_update op per parameter.
    """
def write_hyper(hyper: flowgrad._core.Tensor, values: collections.abc.Sequence[typing.SupportsFloat]) -> None:
    """
    Writes host values into a hyper-parameter tensor on any device.
    """
