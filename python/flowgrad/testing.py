"""fg.testing: comparisons against NumPy and float64 finite-difference gradient checks."""
import numpy as np

from . import _core
from ._grad_mode import no_grad

__all__ = ["assert_close", "gradcheck"]

_DEFAULT_TOLERANCES = {  # (rtol, atol) per dtype, close to PyTorch's
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def _as_array(x):
    if isinstance(x, _core.Tensor):
        return (x.float() if x.dtype == _core.bfloat16 else x).detach().cpu().numpy()
    return np.asarray(x)


def assert_close(actual, expected, rtol=None, atol=None):
    """Asserts equal shapes and |actual - expected| <= atol + rtol * |expected| elementwise.

    Defaults depend on the less precise dtype of the two; integer and bool compare exactly.
    """
    dtype_name = str(actual.dtype).split(".")[-1] if isinstance(actual, _core.Tensor) else None
    a, e = _as_array(actual), _as_array(expected)
    if a.shape != e.shape:
        raise AssertionError(f"shape mismatch: actual {a.shape} vs expected {e.shape}")
    names = [n for n in (dtype_name, a.dtype.name, e.dtype.name) if n in _DEFAULT_TOLERANCES]
    default = max((_DEFAULT_TOLERANCES[n] for n in names), default=(0.0, 0.0))
    rtol = default[0] if rtol is None else rtol
    atol = default[1] if atol is None else atol
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        bad = a != e
    else:
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(e64)
        same_inf = np.isinf(a64) & (a64 == e64)
        with np.errstate(invalid="ignore"):
            bad = ~(both_nan | same_inf | (np.abs(a64 - e64) <= atol + rtol * np.abs(e64)))
    if bad.any():
        idx = np.unravel_index(np.argmax(bad), bad.shape) if bad.shape else ()
        raise AssertionError(
            f"{int(bad.sum())} of {bad.size} elements differ (rtol={rtol}, atol={atol}); "
            f"first at index {tuple(int(i) for i in idx)}: actual {a[idx]!r} vs expected {e[idx]!r}")


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """Checks autograd's gradients of fn(*inputs) against float64 central differences.

    inputs are float64 tensors; those with requires_grad are checked. The output may be any
    shape: each element's gradient is checked (through a random projection for speed).
    Returns True or raises AssertionError naming the input and the worst element.
    """
    inputs = [t if isinstance(t, _core.Tensor) else _core.tensor(t, dtype=_core.float64) for t in inputs]
    for i, t in enumerate(inputs):
        if t.requires_grad and t.dtype != _core.float64:
            raise AssertionError(f"gradcheck: input {i} is {t.dtype!r}; use float64 inputs")
    out = fn(*inputs)
    rng = np.random.default_rng(0)
    projection = _core.tensor(rng.standard_normal(out.shape), dtype=_core.float64)

    def scalar_of(*xs):
        with no_grad():
            return float((fn(*xs) * projection).sum().item())

    checked = [i for i, t in enumerate(inputs) if t.requires_grad]
    if not checked:
        raise AssertionError("gradcheck: no input requires grad")
    analytic = _core.grad([(out * projection).sum()], [inputs[i] for i in checked], allow_unused=True)
    for k, i in enumerate(checked):
        base = inputs[i].detach().numpy().copy()
        numeric = np.zeros_like(base)
        flat = numeric.reshape(-1)
        for j in range(base.size):
            plus, minus = base.copy(), base.copy()
            plus.reshape(-1)[j] += eps
            minus.reshape(-1)[j] -= eps
            args_p = list(inputs)
            args_m = list(inputs)
            args_p[i] = _core.tensor(plus, dtype=_core.float64)
            args_m[i] = _core.tensor(minus, dtype=_core.float64)
            flat[j] = (scalar_of(*args_p) - scalar_of(*args_m)) / (2 * eps)
        got = np.zeros_like(base) if analytic[k] is None else analytic[k].numpy()
        err = np.abs(got - numeric) - (atol + rtol * np.abs(numeric))
        if err.size and err.max() > 0:
            j = np.unravel_index(np.argmax(err), err.shape)
            raise AssertionError(
                f"gradcheck: input {i}, element {tuple(int(x) for x in j)}: autograd {got[j]!r} vs "
                f"finite difference {numeric[j]!r} (atol={atol}, rtol={rtol})")
    return True

