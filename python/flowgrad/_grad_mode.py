"""no_grad / enable_grad: context managers and decorators over the engine's grad mode."""
import functools

from . import _core


class _GradMode:
    _enabled = True

    def __enter__(self):
        self._previous = _core.is_grad_enabled()
        _core.set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _core.set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_GradMode):
    """Ops inside do not record autograd history (context manager or decorator)."""
    _enabled = False


class enable_grad(_GradMode):
    """Re-enables autograd recording inside a no_grad block (context manager or decorator)."""
    _enabled = True


class set_grad_enabled(_GradMode):
    """Sets grad mode to `mode` inside the block (context manager)."""

    def __init__(self, mode):
        self._enabled = bool(mode)


def is_grad_enabled():
    """Whether ops record autograd history on this thread."""
    return _core.is_grad_enabled()
