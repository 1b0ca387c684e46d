"""Learning-rate schedulers: they set param_groups[i]['lr'] once per step() (usually per epoch).

state_dict() is plain JSON-able data (counters, base rates, options); load_state_dict() checks it
against the scheduler's own fields before taking it, so a checkpoint resumes the schedule."""
import copy
import math

from .. import _core

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR", "ReduceLROnPlateau"]


def _same_kind(saved, own):
    """Whether a saved state value can stand in for `own` (JSON makes tuples lists)."""
    def number(v):
        return type(v) in (int, float)

    if number(own):
        return number(saved)
    if isinstance(own, (list, tuple)):
        return isinstance(saved, (list, tuple)) and len(saved) == len(own) and all(map(_same_kind, saved, own))
    return type(saved) is type(own)


def _checked_state(scheduler, state):
    """`state` when it is a state_dict of this scheduler with values it accepts, else InvalidArgumentError."""
    name = type(scheduler).__name__
    own = scheduler.state_dict()
    if not isinstance(state, dict) or set(state) != set(own):
        raise _core.InvalidArgumentError(f"{name}.load_state_dict: expected the keys {sorted(own)}, got {state!r:.200}")
    bad = {k: state[k] for k in own if not _same_kind(state[k], own[k])}
    if bad:
        raise _core.InvalidArgumentError(f"{name}.load_state_dict: values of the wrong kind or length: {bad!r:.200}")
    probe = copy.copy(scheduler)  # checks the options as the constructor does, without touching `scheduler`
    probe.__dict__.update(copy.deepcopy(state))
    probe._check()
    return copy.deepcopy(state)


class LRScheduler:
    """Base class: base_lrs from the groups at construction, last_epoch counts step() calls."""

    _checked_state = _checked_state  # a method: load_checkpoint checks every part before assigning any

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.last_epoch = 0
        self._check()
        self._apply()

    def _check(self):
        """Raises InvalidArgumentError on options this scheduler cannot run with."""

    def lr_at(self, base_lr, epoch):
        raise NotImplementedError

    def _apply(self):
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(base, self.last_epoch)

    def step(self):
        """Advances one epoch and updates the learning rates."""
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self):
        """The learning rates now set, one per group."""
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        """Counters, base rates and options (LambdaLR's function is code, not state)."""
        return copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in ("optimizer", "fn")})

    def load_state_dict(self, state):
        """Restores state_dict() and sets the learning rates it implies."""
        self.__dict__.update(self._checked_state(state))
        self._apply()


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def _check(self):
        if self.step_size <= 0:
            raise _core.InvalidArgumentError(f"StepLR: step_size must be positive, got {self.step_size}")

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Linear warm-up over `warmup` epochs, then cosine from base_lr down to eta_min at T_max."""

    def __init__(self, optimizer, T_max, eta_min=0.0, warmup=0):
        self.T_max, self.eta_min, self.warmup = T_max, eta_min, warmup
        super().__init__(optimizer)

    def _check(self):
        if self.T_max <= 0 or not 0 <= self.warmup < self.T_max:
            raise _core.InvalidArgumentError(f"CosineAnnealingLR: need T_max > 0 and 0 <= warmup < T_max, "
                                             f"got T_max={self.T_max}, warmup={self.warmup}")

    def lr_at(self, base_lr, epoch):
        if epoch < self.warmup:
            return base_lr * (epoch + 1) / self.warmup
        t = min(epoch, self.T_max) - self.warmup
        span = self.T_max - self.warmup
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * t / span)) / 2


class LambdaLR(LRScheduler):
    """lr = base_lr * fn(epoch)."""

    def __init__(self, optimizer, fn):
        self.fn = fn
        super().__init__(optimizer)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.fn(epoch)


class ReduceLROnPlateau:
    """Multiplies the lr by `factor` when the watched value has not improved by more than
    `threshold` (relative) for `patience` steps. step(value) takes the value; with a `trend`
    (anything with latest(), e.g. a fg.Trend, or a function returning one, such as
    `lambda: graph.trend("val_loss")`), step() reads its latest value."""

    _checked_state = _checked_state

    def __init__(self, optimizer, trend=None, patience=10, factor=0.1, threshold=1e-4, mode="min", min_lr=0.0):
        self.optimizer, self.trend = optimizer, trend
        self.patience, self.factor, self.threshold, self.mode, self.min_lr = patience, factor, threshold, mode, min_lr
        self._check()
        self.best = math.inf if mode == "min" else -math.inf
        self.bad_steps = 0

    def _check(self):
        if not 0 < self.factor < 1:
            raise _core.InvalidArgumentError(f"ReduceLROnPlateau: factor must be in (0, 1), got {self.factor}")
        if self.mode not in ("min", "max"):
            raise _core.InvalidArgumentError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {self.mode!r}")

    def _improved(self, value):
        if self.mode == "min":
            return value < self.best * (1 - self.threshold) if self.best > 0 else value < self.best - abs(self.best) * self.threshold
        return value > self.best * (1 + self.threshold) if self.best > 0 else value > self.best + abs(self.best) * self.threshold

    def step(self, value=None):
        """Records one value (or the trend's latest) and reduces the lr after `patience` bad steps."""
        if value is None:
            if self.trend is None:
                raise _core.InvalidArgumentError("ReduceLROnPlateau.step: pass a value or construct with a trend")
            trend = self.trend() if callable(self.trend) else self.trend
            value = trend.latest()
        value = float(value)
        if self._improved(value):
            self.best, self.bad_steps = value, 0
            return
        self.bad_steps += 1
        if self.bad_steps > self.patience:
            for group in self.optimizer.param_groups:
                group["lr"] = max(group["lr"] * self.factor, self.min_lr)
            self.bad_steps = 0

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        """Best value, bad-step counter and options (the lr itself is in the optimizer's state)."""
        return copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in ("optimizer", "trend")})

    def load_state_dict(self, state):
        """Restores state_dict()."""
        self.__dict__.update(self._checked_state(state))
