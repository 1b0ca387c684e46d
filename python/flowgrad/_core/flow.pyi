"""
Built-in modules for flows (fg.flow.Add(), ...).
"""
from __future__ import annotations
import flowgrad._core
import typing
__all__: list[str] = ['Add', 'ArgmaxSelector', 'Cat', 'FixedSelector', 'LearnedHalt', 'Mean', 'Reshape', 'SigmoidRouter', 'SoftmaxRouter', 'StateAdd', 'ThresholdHalt']
class Add(flowgrad._core.Module):
    """
    Merge: the sum of the inputs.
    """
    def __init__(self) -> None:
        ...
class Mean(flowgrad._core.Module):
    """
    Merge: the mean of the inputs.
    """
    def __init__(self) -> None:
        ...
class Cat(flowgrad._core.Module):
    """
    Merge: the inputs concatenated along dim.
    """
    def __init__(self, dim: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        ...
class Reshape(flowgrad._core.Module):
    """
    x.reshape(*shape) (one -1 allowed).
    """
    def __init__(self, *args) -> None:
        ...
class SoftmaxRouter(flowgrad._core.Module):
    """
    Gate router: softmax(Linear(in_dim, n)(x)), weights [..., n] summing to 1.
    """
    def __init__(self, in_dim: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class SigmoidRouter(flowgrad._core.Module):
    """
    Gate router: sigmoid(Linear(in_dim, n)(x)), independent weights [..., n] in (0, 1).
    """
    def __init__(self, in_dim: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class ArgmaxSelector(flowgrad._core.Module):
    """
    Switch selector: the branch whose Linear(in_dim, n) score, averaged over the batch, is highest.
    """
    def __init__(self, in_dim: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class FixedSelector(flowgrad._core.Module):
    """
    Switch selector: always branch i.
    """
    def __init__(self, i: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class LearnedHalt(flowgrad._core.Module):
    """
    Loop halt: mean(Linear(in_dim, 1)(x)); the loop stops when it is > 0.
    """
    def __init__(self, in_dim: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class ThresholdHalt(flowgrad._core.Module):
    """
    Loop halt: mean(x) - threshold; the loop stops once the mean exceeds the threshold.
    """
    def __init__(self, threshold: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
class StateAdd(flowgrad._core.Module):
    """
    State module: x + state, where state is a forward reference (zeros on the first call).
    """
    def __init__(self) -> None:
        ...
