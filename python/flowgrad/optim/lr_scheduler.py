"""Learning-rate schedulers: they set param_groups[i]['lr'] once per step() (usually per epoch)."""
import math

from .. import _core

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR", "ReduceLROnPlateau"]


class LRScheduler:
    """Base class: base_lrs from the groups at construction, last_epoch counts step() calls."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lrs = [g["lr"] for g in optimizer.param_groups]
        self.last_epoch = 0
        self._apply()

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
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "fn")}

    def load_state_dict(self, state):
        self.__dict__.update(state)
        self._apply()


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1):
        if step_size <= 0:
            raise _core.InvalidArgumentError(f"StepLR: step_size must be positive, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Linear warm-up over `warmup` epochs, then cosine from base_lr down to eta_min at T_max."""

    def __init__(self, optimizer, T_max, eta_min=0.0, warmup=0):
        if T_max <= 0 or not 0 <= warmup < T_max:
            raise _core.InvalidArgumentError(f"CosineAnnealingLR: need T_max > 0 and 0 <= warmup < T_max, "
                                             f"got T_max={T_max}, warmup={warmup}")
        self.T_max, self.eta_min, self.warmup = T_max, eta_min, warmup
        super().__init__(optimizer)

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

    def __init__(self, optimizer, trend=None, patience=10, factor=0.1, threshold=1e-4, mode="min", min_lr=0.0):
        if not 0 < factor < 1:
            raise _core.InvalidArgumentError(f"ReduceLROnPlateau: factor must be in (0, 1), got {factor}")
        if mode not in ("min", "max"):
            raise _core.InvalidArgumentError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        self.optimizer, self.trend = optimizer, trend
        self.patience, self.factor, self.threshold, self.mode, self.min_lr = patience, factor, threshold, mode, min_lr
        self.best = math.inf if mode == "min" else -math.inf
        self.bad_steps = 0

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
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "trend")}

    def load_state_dict(self, state):
        self.__dict__.update(state)
