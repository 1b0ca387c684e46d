"""flowgrad: tensors, autograd and neural networks with every number computed in C++.

    import flowgrad as fg
    x = fg.randn(4, 3, requires_grad=True)
    (x @ x.t()).relu().sum().backward()
"""


def _load_core():
    """Imports the compiled module with two OpenBLAS settings, read once when the bundled OpenBLAS
    loads, in the environment for that moment only (a value the user set is kept; NumPy's own
    OpenBLAS loads first, untouched):
    - OPENBLAS_THREAD_TIMEOUT=4 on the default FLOWGRAD_BLAS_THREADS=pool. OpenBLAS's threaded GEMMs
      then run their jobs on flowgrad's pool, and a job marks the status word of the OpenBLAS server
      thread of its index busy; a server thread that finds its word busy when its spin times out
      spins on, so right after load (while they spin, about 0.1 s) they kept spinning beside the
      GEMMs and took a core from them (a 1024x128x128 GEMM 193 us instead of 97). With the timeout
      they sleep at once; they have nothing to do on the pool.
    - OPENBLAS_CORETYPE from a forced FLOWGRAD_ISA (generic: Prescott, OpenBLAS's SSE kernels;
      avx2: Haswell), so that one switch holds the float32 GEMMs, which go through OpenBLAS below
      avx512, at the level too."""
    import os
    import numpy  # noqa: F401  (its OpenBLAS loads with the user's environment)
    settings = {}
    if os.environ.get("FLOWGRAD_BLAS_THREADS", "pool") in ("", "pool"):
        settings["OPENBLAS_THREAD_TIMEOUT"] = "4"
    core = {"generic": "Prescott", "avx2": "Haswell"}.get(os.environ.get("FLOWGRAD_ISA", ""))
    if core:
        settings["OPENBLAS_CORETYPE"] = core
    settings = {k: v for k, v in settings.items() if k not in os.environ}
    os.environ.update(settings)
    try:
        from . import _core  # noqa: F401
    finally:
        for k in settings:
            del os.environ[k]


_load_core()
del _load_core
from . import _core
from ._core import (
    Tensor, dtype, device, promote_types, set_default_dtype, get_default_dtype,
    bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
    FlowgradError, ShapeError, DTypeError, DeviceError, GraphError, CheckpointError,
    OutOfMemoryError, IndexOutOfRangeError, InvalidArgumentError,
    tensor, from_numpy, from_dlpack, zeros, ones, empty, full, arange, linspace, eye,
    rand, randn, randperm, manual_seed, get_rng_state, set_rng_state,
    get_num_threads, set_num_threads, blas_name, build_config, cpu_memory_stats, cpu_empty_cache,
    Trend, TrendGroup, format_duration,
    gelu, clamp, where, logical_and, logical_or, logical_xor, logical_not,
    sum, mean, max, min, amax, amin, var, std, logsumexp, cumsum, argmax, argmin, matmul,
    reshape, permute, transpose, t, contiguous, squeeze, unsqueeze, expand, broadcast_to,
    flatten, narrow, cat, stack, split, chunk, pad, repeat, flip, gather, index_select, index_add,
    scatter_add, masked_fill, one_hot, nonzero, topk, sort, argsort, kthvalue, return_types, clone,
)
from ._ops import *  # noqa: F401,F403  (the op table's functions: neg, exp, add, eq, ...)
import sys as _sys
_sys.modules[__name__ + ".return_types"] = return_types  # so (values, indices) tuples pickle
from ._grad_mode import no_grad, enable_grad, set_grad_enabled, is_grad_enabled
from . import _tensor  # noqa: F401  (installs Tensor.__repr__ and friends)
from . import _pickle  # noqa: F401  (installs pickling and copy.deepcopy)
from . import amp, autograd, cuda, data, distributed, nn, optim, testing, viz, accelerator, backends
from ._tensor_methods import mm, unique, finfo, iinfo
import types as _types
utils = _types.ModuleType(__name__ + ".utils", "PyTorch's torch.utils path: fg.utils.data is fg.data.")
utils.data = data
_sys.modules[utils.__name__], _sys.modules[utils.__name__ + ".data"] = utils, data  # from flowgrad.utils.data import
from .amp import autocast, is_autocast_enabled, get_autocast_dtype
from ._flow import flow, FlowBuilder, Graph
from .io import save, load, save_checkpoint, load_checkpoint
from .compile import compile, ForwardPlan
from ._compiled_module import CompiledModule
from ._cache_ops import index_copy, scatter, narrow  # noqa: F811  (narrow also takes a tensor start)
from ._generate import generate, sample_logits
from ._einsum import einsum
from ._composite import (  # noqa: A004  (fg.any / fg.all shadow the builtins here, as torch.any does)
    isnan, isinf, isfinite, any, all, isclose, allclose, tril, triu, diag, outer, roll, lerp, bmm, meshgrid,
    unbind, masked_select, inference_mode, linalg, bernoulli, multinomial,
)

import numpy as _np

__version__ = "0.1.0"


def _like(fn, t, dtype, device):
    """(shape, dtype, device) for fn_like(t, ...): t must be a Tensor (TypeError naming fn otherwise)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}: argument 't' must be an fg.Tensor, got {type(t).__name__} {t!r:.80}")
    return t.shape, dtype or t.dtype, device or t.device


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros with t's shape (and dtype/device unless given); TypeError unless t is a Tensor."""
    shape, dtype, device = _like("zeros_like", t, dtype, device)
    return zeros(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    """A tensor of ones with t's shape (and dtype/device unless given); TypeError unless t is a Tensor."""
    shape, dtype, device = _like("ones_like", t, dtype, device)
    return ones(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def full_like(t, value, dtype=None, device=None, requires_grad=False):
    """A tensor filled with value, with t's shape (and dtype/device unless given); TypeError unless t is
    a Tensor."""
    shape, dtype, device = _like("full_like", t, dtype, device)
    return full(shape, value, dtype=dtype, device=device, requires_grad=requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    """Uniform [0, 1) samples with t's shape (and dtype/device unless given); TypeError unless t is a
    Tensor."""
    shape, dtype, device = _like("rand_like", t, dtype, device)
    return rand(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    """Standard normal samples with t's shape (and dtype/device unless given); TypeError unless t is a
    Tensor."""
    shape, dtype, device = _like("randn_like", t, dtype, device)
    return randn(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def randint(low, high=None, size=(), *, dtype=None, device=None):
    """Uniform integers in [low, high) of shape size (int64 unless dtype says otherwise); PyTorch's
    randint(high, size) too: a sequence as the second argument is the size and low is 0."""
    if isinstance(high, (tuple, list)) and size == ():
        low, high, size = 0, low, high
    return _core.randint(low, high, size, dtype=dtype, device=device)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor with t's shape (and dtype/device unless given); TypeError unless t is
    a Tensor."""
    shape, dtype, device = _like("empty_like", t, dtype, device)
    return empty(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def softmax(input, dim, dtype=None):
    """torch.softmax: F.softmax along dim (of input converted to dtype first when given)."""
    return nn.functional.softmax(input if dtype is None else input.to(dtype), dim)


def log_softmax(input, dim, dtype=None):
    """torch.log_softmax: F.log_softmax along dim (of input converted to dtype first when given)."""
    return nn.functional.log_softmax(input if dtype is None else input.to(dtype), dim)


def numel(input):
    """The number of elements of a tensor."""
    return input.numel()


def is_tensor(obj):
    """Whether obj is an fg.Tensor."""
    return isinstance(obj, Tensor)


def as_tensor(data, dtype=None, device=None):
    """data as a tensor without a copy where it can be: a Tensor of that dtype and device is returned
    as it is, a NumPy array (no dtype given) shares its memory (from_numpy); anything else is copied
    (fg.tensor)."""
    if isinstance(data, Tensor):
        same = (dtype is None or dtype == data.dtype) and (device is None or _core.device(device) == data.device)
        return data if same else data.to(dtype=dtype or data.dtype, device=device or data.device)
    if isinstance(data, _np.ndarray) and dtype is None and device in (None, "cpu"):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


# PyTorch's dtype aliases (defined last: `float` and `int` shadow the builtins in this module)
long, short, half, double = int64, int16, float16, float64
float, int = float32, int32  # noqa: A001

__all__ = [name for name in dir() if not name.startswith("_")]
