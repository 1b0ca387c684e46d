"""
In-place initialisers (fg.nn.init).
"""
from __future__ import annotations
import flowgrad._core
import typing
__all__: list[str] = ['calculate_gain', 'constant_', 'kaiming_normal_', 'kaiming_uniform_', 'normal_', 'ones_', 'uniform_', 'xavier_normal_', 'xavier_uniform_', 'zeros_']
def calculate_gain(nonlinearity: str, param: typing.SupportsFloat | typing.SupportsIndex = 0.01) -> float:
    """
    The recommended gain for a nonlinearity.
    """
def constant_(tensor: flowgrad._core.Tensor, val: typing.SupportsFloat | typing.SupportsIndex) -> flowgrad._core.Tensor:
    """
    Fills with a value.
    """
def kaiming_normal_(tensor: flowgrad._core.Tensor, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, mode: str = 'fan_in', nonlinearity: str = 'leaky_relu') -> flowgrad._core.Tensor:
    """
    He normal.
    """
def kaiming_uniform_(tensor: flowgrad._core.Tensor, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, mode: str = 'fan_in', nonlinearity: str = 'leaky_relu') -> flowgrad._core.Tensor:
    """
    He uniform.
    """
def normal_(tensor: flowgrad._core.Tensor, mean: typing.SupportsFloat | typing.SupportsIndex = 0.0, std: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> flowgrad._core.Tensor:
    """
    Fills with N(mean, std^2).
    """
def ones_(tensor: flowgrad._core.Tensor) -> flowgrad._core.Tensor:
    """
    Fills with 1.
    """
def uniform_(tensor: flowgrad._core.Tensor, a: typing.SupportsFloat | typing.SupportsIndex = 0.0, b: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> flowgrad._core.Tensor:
    """
    Fills with U(a, b).
    """
def xavier_normal_(tensor: flowgrad._core.Tensor, gain: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> flowgrad._core.Tensor:
    """
    Glorot normal.
    """
def xavier_uniform_(tensor: flowgrad._core.Tensor, gain: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> flowgrad._core.Tensor:
    """
    Glorot uniform.
    """
def zeros_(tensor: flowgrad._core.Tensor) -> flowgrad._core.Tensor:
    """
    Fills with 0.
    """
