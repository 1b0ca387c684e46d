"""
Fused multi-tensor optimizer steps (used by fg.optim).
"""
from __future__ import annotations
import collections.abc
import flowgrad._core
import typing
__all__: list[str] = ['adam_step', 'clip_grad_norm', 'sgd_step']
def adam_step(params: collections.abc.Sequence[flowgrad._core.Tensor], exp_avgs: collections.abc.Sequence[flowgrad._core.Tensor], exp_avg_sqs: collections.abc.Sequence[flowgrad._core.Tensor], steps: collections.abc.Sequence[flowgrad._core.Tensor], lr: typing.SupportsFloat | typing.SupportsIndex, beta1: typing.SupportsFloat | typing.SupportsIndex, beta2: typing.SupportsFloat | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex, weight_decay: typing.SupportsFloat | typing.SupportsIndex, decoupled: bool) -> None:
    """
    One Adam/AdamW step over a group, in place.
    """
def clip_grad_norm(params: collections.abc.Sequence[flowgrad._core.Tensor], max_norm: typing.SupportsFloat | typing.SupportsIndex) -> float:
    """
    Scales gradients to a global L2 norm of at most max_norm; returns the norm before.
    """
def sgd_step(params: collections.abc.Sequence[flowgrad._core.Tensor], momentum_buffers: collections.abc.Sequence[flowgrad._core.Tensor | None], lr: typing.SupportsFloat | typing.SupportsIndex, momentum: typing.SupportsFloat | typing.SupportsIndex, dampening: typing.SupportsFloat | typing.SupportsIndex, weight_decay: typing.SupportsFloat | typing.SupportsIndex, nesterov: bool) -> list:
    """
    One SGD step over a group; returns the momentum buffers.
    """
