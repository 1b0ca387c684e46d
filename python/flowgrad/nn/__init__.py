"""fg.nn: neural-network functions (fg.nn.functional)."""
from . import functional

__all__ = ["functional"]
