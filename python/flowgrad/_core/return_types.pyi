"""
Named tuples (values, indices) that max/min with a dim, sort, topk and kthvalue return, like torch.return_types.
"""
from __future__ import annotations
import typing
from flowgrad._core import Tensor
__all__: list[str] = ['kthvalue', 'max', 'min', 'sort', 'topk']
class max(typing.NamedTuple):
    values: Tensor
    indices: Tensor
class min(typing.NamedTuple):
    values: Tensor
    indices: Tensor
class sort(typing.NamedTuple):
    values: Tensor
    indices: Tensor
class topk(typing.NamedTuple):
    values: Tensor
    indices: Tensor
class kthvalue(typing.NamedTuple):
    values: Tensor
    indices: Tensor
