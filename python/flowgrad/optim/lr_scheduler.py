"""Learning-rate schedulers: they set param_groups[i]['lr'] once per step() (usually per epoch).

state_dict() is plain JSON-able data (counters, base rates, options); load_state_dict() checks it
against the scheduler's own fields before taking it, so a checkpoint resumes the schedule."""
import bisect
import copy
import math

from .. import _core

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR", "LinearLR",
           "OneCycleLR", "SequentialLR", "ReduceLROnPlateau"]


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
    _own_base = False  # base_lrs come from the scheduler's options, not the optimizer (OneCycleLR)

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


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (the number of milestones <= epoch)."""

    def __init__(self, optimizer, milestones, gamma=0.1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def _check(self):
        if any(not isinstance(m, int) or m < 0 for m in self.milestones):
            raise _core.InvalidArgumentError(f"MultiStepLR: milestones must be non-negative ints, got {self.milestones}")

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** epoch."""

    def __init__(self, optimizer, gamma):
        self.gamma = gamma
        super().__init__(optimizer)

    def _check(self):
        if not self.gamma > 0:
            raise _core.InvalidArgumentError(f"ExponentialLR: gamma must be > 0, got {self.gamma}")

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** epoch


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


class LinearLR(LRScheduler):
    """lr = base_lr * factor, the factor going linearly from start_factor to end_factor over
    total_iters epochs and staying there (a warm-up: LinearLR(opt, 0.01, 1.0, 100))."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5):
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer)

    def _check(self):
        if not (0 < self.start_factor <= 1 and 0 <= self.end_factor <= 1 and self.total_iters > 0):
            raise _core.InvalidArgumentError(
                f"LinearLR: need 0 < start_factor <= 1, 0 <= end_factor <= 1 and total_iters > 0, got start_factor="
                f"{self.start_factor}, end_factor={self.end_factor}, total_iters={self.total_iters}")

    def lr_at(self, base_lr, epoch):
        t = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith and Topin), stepped once per batch: from max_lr / div_factor up to
    max_lr over the first pct_start of total_steps, then down to that start / final_div_factor;
    with three_phase, back to the start first and only then down. anneal_strategy 'cos' or
    'linear'. max_lr: one value, or one per param group. PyTorch's formulas, except that a step
    past the last one keeps the final rate instead of extrapolating."""

    _own_base = True

    def __init__(self, optimizer, max_lr, total_steps, pct_start=0.3, anneal_strategy="cos", div_factor=25.0,
                 final_div_factor=1e4, three_phase=False):
        groups = optimizer.param_groups
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * len(groups)
        if len(max_lrs) != len(groups):
            raise _core.InvalidArgumentError(f"OneCycleLR: {len(max_lrs)} max_lr values for {len(groups)} param groups")
        self.total_steps, self.pct_start, self.anneal_strategy = total_steps, pct_start, anneal_strategy
        self.div_factor, self.final_div_factor, self.three_phase = div_factor, final_div_factor, three_phase
        self._check()
        for group, top in zip(groups, max_lrs):
            group["lr"] = float(top)  # the base rates are the peaks
        super().__init__(optimizer)

    def _check(self):
        if not (isinstance(self.total_steps, int) and self.total_steps > 1 and 0 < self.pct_start < 1
                and self.div_factor > 0 and self.final_div_factor > 0):
            raise _core.InvalidArgumentError(
                f"OneCycleLR: need an integer total_steps > 1, 0 < pct_start < 1 and positive div factors, got "
                f"total_steps={self.total_steps!r}, pct_start={self.pct_start}, div_factor={self.div_factor}, "
                f"final_div_factor={self.final_div_factor}")
        if self.anneal_strategy not in ("cos", "linear"):
            raise _core.InvalidArgumentError(
                f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {self.anneal_strategy!r}")

    def step(self):
        if self.last_epoch >= self.total_steps:
            raise _core.InvalidArgumentError(
                f"OneCycleLR: stepped {self.last_epoch + 1} times, past total_steps={self.total_steps}")
        super().step()

    def lr_at(self, base_lr, epoch):
        start = base_lr / self.div_factor
        low = start / self.final_div_factor
        up = float(self.pct_start * self.total_steps) - 1
        if self.three_phase:
            phases = [(up, start, base_lr), (2 * up, base_lr, start), (self.total_steps - 1, start, low)]
        else:
            phases = [(up, start, base_lr), (self.total_steps - 1, base_lr, low)]
        begin = 0.0
        for i, (end, a, b) in enumerate(phases):
            if epoch <= end or i == len(phases) - 1:
                pct = min(1.0, (epoch - begin) / (end - begin)) if end > begin else 1.0
                if self.anneal_strategy == "cos":
                    return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1)
                return (b - a) * pct + a
            begin = end


class SequentialLR(LRScheduler):
    """Runs `schedulers` one after another: scheduler i from epoch milestones[i - 1] on, counting
    its epochs from 0 there (a warm-up then a decay: SequentialLR(opt, [LinearLR(...),
    CosineAnnealingLR(...)], milestones=[100])). Every scheduler starts from the first one's base
    rates (the optimizer's before it was made), except OneCycleLR, whose come from max_lr."""

    def __init__(self, optimizer, schedulers, milestones):
        self.schedulers, self.milestones = list(schedulers), list(milestones)
        for sch in self.schedulers:
            if not isinstance(sch, LRScheduler) or isinstance(sch, SequentialLR):
                raise _core.InvalidArgumentError(f"SequentialLR: expected epoch schedulers (StepLR, LinearLR, ...), "
                                                 f"got {type(sch).__name__}")
            if sch.optimizer is not optimizer:
                raise _core.InvalidArgumentError(f"SequentialLR: {type(sch).__name__} schedules another optimizer")
        if not self.schedulers:
            raise _core.InvalidArgumentError("SequentialLR: no schedulers")
        for sch in self.schedulers[1:]:
            if not sch._own_base:
                sch.base_lrs = list(self.schedulers[0].base_lrs)
        self.optimizer = optimizer
        self.base_lrs = list(self.schedulers[0].base_lrs)
        self.last_epoch = 0
        self._check()
        self._apply()

    def _check(self):
        m = self.milestones
        if len(m) != len(self.schedulers) - 1 or any(not isinstance(v, int) or v <= 0 for v in m) or m != sorted(set(m)):
            raise _core.InvalidArgumentError(
                f"SequentialLR: need {len(self.schedulers) - 1} increasing positive integer milestones for "
                f"{len(self.schedulers)} schedulers, got {m!r}")

    def _apply(self):
        i = bisect.bisect_right(self.milestones, self.last_epoch)
        sch = self.schedulers[i]
        sch.last_epoch = self.last_epoch - (self.milestones[i - 1] if i else 0)
        sch._apply()

    def state_dict(self):
        """The epoch counter, the milestones and every scheduler's own state_dict()."""
        return {"last_epoch": self.last_epoch, "milestones": list(self.milestones),
                "schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state):
        """Restores state_dict() (checked whole before anything is taken) and sets the rates it implies."""
        if not isinstance(state, dict) or set(state) != {"last_epoch", "milestones", "schedulers"} \
                or not isinstance(state["schedulers"], list) or len(state["schedulers"]) != len(self.schedulers):
            raise _core.InvalidArgumentError(f"SequentialLR.load_state_dict: expected last_epoch, milestones and "
                                             f"{len(self.schedulers)} scheduler states, got {state!r:.200}")
        parts = [s._checked_state(saved) for s, saved in zip(self.schedulers, state["schedulers"])]
        probe = copy.copy(self)
        probe.last_epoch, probe.milestones = state["last_epoch"], list(state["milestones"])
        if not isinstance(probe.last_epoch, int) or probe.last_epoch < 0:
            raise _core.InvalidArgumentError(f"SequentialLR.load_state_dict: last_epoch must be a count, "
                                             f"got {probe.last_epoch!r}")
        probe._check()
        for s, part in zip(self.schedulers, parts):
            s.__dict__.update(part)
        self.last_epoch, self.milestones = probe.last_epoch, probe.milestones
        self._apply()


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
