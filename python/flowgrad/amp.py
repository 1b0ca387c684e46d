"""fg.amp: automatic mixed precision. `fg.autocast` picks each op's precision; `GradScaler`
keeps float16 gradients from underflowing.

    scaler = fg.amp.GradScaler()
    with fg.autocast("cuda", dtype=fg.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

The policy follows torch.autocast: matmul (and linear, conv, attention, which are built on it)
runs in the low dtype; reductions (sum, mean, var, logsumexp), softmax, norms, exp, log, pow and
softplus run in float32; every other op follows its inputs (NumPy promotion: widest wins).
float64 tensors are never cast. Casts are ordinary `cast` ops, so autograd carries float32
gradients back to float32 parameters and fg.compile records them. The state is per thread.
"""
import functools
import math

from . import _core
from ._grad_mode import no_grad

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "GradScaler"]

_LOW_DTYPES = (_core.bfloat16, _core.float16)


def _device_type(device_type):
    device_type = str(device_type)
    if device_type not in ("cpu", "cuda"):
        raise _core.InvalidArgumentError(f"autocast: device_type must be 'cpu' or 'cuda', got {device_type!r}")
    return device_type


class autocast:
    """Runs ops on `device_type` ('cpu' or 'cuda') under the mixed precision policy, with
    `dtype` (fg.bfloat16 or fg.float16) as the low precision. A context manager or a decorator;
    `enabled=False` turns autocast off inside an enclosing autocast block."""

    def __init__(self, device_type, dtype=_core.bfloat16, enabled=True):
        self.device_type = _device_type(device_type)
        if dtype not in _LOW_DTYPES:
            raise _core.InvalidArgumentError(f"autocast: dtype must be fg.bfloat16 or fg.float16, got {dtype!r}")
        self.dtype = dtype
        self.enabled = bool(enabled)
        self._saved = []

    def __enter__(self):
        self._saved.append(_core._autocast_state(self.device_type))
        _core._set_autocast(self.device_type, self.enabled, self.dtype)
        return self

    def __exit__(self, *exc):
        _core._set_autocast(self.device_type, *self._saved.pop())
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return wrapped


def is_autocast_enabled(device_type="cuda"):
    """True inside an enabled fg.autocast block for device_type on this thread."""
    return _core._autocast_state(_device_type(device_type))[0]


def get_autocast_dtype(device_type="cuda"):
    """The low precision dtype autocast uses (or would use) for device_type on this thread."""
    return _core._autocast_state(_device_type(device_type))[1]


class GradScaler:
    """Dynamic loss scaling for float16 training (torch.amp.GradScaler's semantics).

    `scale(loss)` multiplies by the scale; `unscale_(optimizer)` divides the gradients by it and
    checks them for inf/NaN on their device (no host read per parameter); `step(optimizer)` reads
    that flag once and skips the step when a gradient was not finite; `update()` halves the scale
    (backoff_factor) after a skipped step and doubles it (growth_factor) after growth_interval
    clean steps in a row."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        if not init_scale > 0 or not growth_factor > 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
            raise _core.InvalidArgumentError(
                "GradScaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= 1, "
                f"got {init_scale}, {growth_factor}, {backoff_factor}, {growth_interval}")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        # id(optimizer) -> its per-device flags (NaN when a gradient was not finite), or the bool
        # read from them once; cleared by update().
        self._found_inf = {}
        self._stepped = set()

    def is_enabled(self):
        """Whether scaling is on (when off, every method passes through)."""
        return self._enabled

    def get_scale(self):
        """The current scale factor (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        """outputs (a tensor, or a list/tuple of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def unscale_(self, optimizer):
        """Divides optimizer's gradients by the scale in place, once per step, and records on the
        device whether any of them is inf or NaN."""
        if not self._enabled:
            return
        if id(optimizer) in self._found_inf:
            raise _core.InvalidArgumentError("GradScaler.unscale_: already called for this optimizer since the last update()")
        inverse = 1.0 / self._scale
        flags = {}
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    g = g * inverse
                    p.grad = g
                    # g * 0 is 0 where g is finite and NaN where it is inf or NaN; the sum keeps a NaN.
                    check = (g * 0.0).sum()
                    key = str(g.device)
                    flags[key] = check if key not in flags else flags[key] + check
        self._found_inf[id(optimizer)] = list(flags.values())

    def _non_finite(self, key):
        found = self._found_inf[key]
        if not isinstance(found, bool):  # the one host read of the step
            found = self._found_inf[key] = any(math.isnan(flag.item()) for flag in found)
        return found

    def step(self, optimizer, *args, **kwargs):
        """Unscales (unless unscale_ ran) and runs optimizer.step() unless a gradient was inf/NaN.
        Returns what optimizer.step returned, or None for a skipped step."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) in self._stepped:
            raise _core.InvalidArgumentError("GradScaler.step: already called for this optimizer since the last update()")
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        self._stepped.add(id(optimizer))
        return None if self._non_finite(id(optimizer)) else optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        """Adjusts the scale after this step's optimizers ran (or sets it to new_scale)."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        elif self._found_inf:
            if any([self._non_finite(key) for key in self._found_inf]):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._found_inf.clear()
        self._stepped.clear()

    def state_dict(self):
        """scale, growth_factor, backoff_factor, growth_interval and the growth tracker."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        """Restores a state_dict() (of an enabled scaler)."""
        if not state_dict:
            raise _core.InvalidArgumentError("GradScaler.load_state_dict: the state_dict is empty (saved by a disabled scaler)")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
