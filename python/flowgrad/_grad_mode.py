"""no_grad / enable_grad / set_grad_enabled: context managers and decorators over grad mode."""
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

    def _clone(self):
        return type(self)()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self._clone():
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_GradMode):
    """Ops inside do not record autograd history (context manager or decorator)."""
    _enabled = False


class enable_grad(_GradMode):
    """Re-enables autograd recording inside a no_grad block (context manager or decorator)."""
    _enabled = True


class set_grad_enabled(_GradMode):
    """Sets grad mode to `mode`, like PyTorch: at once and until changed back as a plain call
    (`fg.set_grad_enabled(False)`), for the block as a context manager, for the call as a decorator."""

    def __init__(self, mode):
        self._enabled = bool(mode)
        self._previous = _core.is_grad_enabled()
        _core.set_grad_enabled(self._enabled)

    def __enter__(self):  # the mode is already set; __exit__ restores the one before the call
        _core.set_grad_enabled(self._enabled)
        return self

    def __call__(self, fn):  # as a decorator the mode applies inside fn only
        _core.set_grad_enabled(self._previous)
        return super().__call__(fn)

    def _clone(self):
        return set_grad_enabled(self._enabled)


def is_grad_enabled():
    """Whether ops record autograd history on this thread."""
    return _core.is_grad_enabled()
