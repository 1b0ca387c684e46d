"""fg.nn.init: in-place initialisers, seeded by fg.manual_seed (all computed in C++)."""
from .._core.init import (  # noqa: F401
    uniform_, normal_, zeros_, ones_, constant_, calculate_gain, xavier_uniform_, xavier_normal_,
    kaiming_uniform_, kaiming_normal_,
)

__all__ = ["uniform_", "normal_", "zeros_", "ones_", "constant_", "calculate_gain", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"]
