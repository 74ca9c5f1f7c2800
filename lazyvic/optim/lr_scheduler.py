"""Learning-rate schedules with PyTorch's names and stepping rules.

A scheduler only writes ``group["lr"]`` of its optimizer. The learning rate
enters each training step's trace as a scalar input, so a schedule never
changes the plan key: every step reuses one compiled plan.

Rates come from closed forms (``lr_at(epoch)``), not from PyTorch's recursive
updates, so the rate after ``n`` steps does not depend on rounding accumulated
along the way and a scheduler restored from ``state_dict`` continues exactly.
They agree with PyTorch's schedules to float rounding.
"""

from __future__ import annotations

import bisect
import functools
import math
from typing import Callable, Iterable, Sequence

from lazyvic import recording


class LRScheduler:
    """Base class: ``step()`` advances ``last_epoch`` and sets each group's ``lr``.

    Construction applies the rate of epoch 0 (PyTorch does the same), and stores
    each group's starting rate as ``initial_lr``.
    """

    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for k, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(
                        f"{type(self).__name__}: param group {k} has no 'initial_lr' "
                        f"(needed when resuming with last_epoch={last_epoch})"
                    )
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, epoch: int) -> list[float]:
        """The learning rate of every group at ``epoch`` (0 = before the first step)."""
        raise NotImplementedError

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch (or go to ``epoch``, PyTorch's deprecated form, which
        ``CosineAnnealingWarmRestarts`` documents for fractional epochs) and set the rates.
        Inside a captured step (``lazyvic.compile``) it runs again at every replay."""
        rec = recording.current()
        if rec is not None:
            return rec.host(functools.partial(self._step, epoch))
        self._step(epoch)

    def _step(self, epoch: float | None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        for g, lr in zip(self.optimizer.param_groups, self.lr_at(self.last_epoch)):
            g["lr"] = float(lr)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        """The rate of every group set by the last step (or by construction)."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Every attribute except the optimizer and functions (PyTorch's rule)."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if k != "optimizer" and not callable(v) and not isinstance(v, LRScheduler) and k != "_schedulers"
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``; one function, or one per group."""

    def __init__(self, optimizer, lr_lambda: Callable | Sequence[Callable], last_epoch: int = -1):
        n = len(optimizer.param_groups)
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n:
            raise ValueError(f"LambdaLR: expected {n} lr_lambdas (one per group), got {len(fns)}")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * f(epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self) -> dict:
        d = super().state_dict()
        d.pop("lr_lambdas", None)
        return d


class StepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if step_size <= 0:
            raise ValueError(f"StepLR: step_size must be positive, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Linear ramp of the factor from ``start_factor`` to ``end_factor`` over ``total_iters`` steps
    (a warm-up), then constant."""

    def __init__(
        self,
        optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ):
        if not (0 < start_factor <= 1 and 0 <= end_factor <= 1):
            raise ValueError(f"LinearLR: factors must be in (0, 1], got {start_factor} and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        t = min(epoch, self.total_iters) / self.total_iters if self.total_iters > 0 else 1.0
        factor = self.start_factor + (self.end_factor - self.start_factor) * t
        return [base * factor for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine decay from ``initial_lr`` to ``eta_min`` over ``T_max`` steps (SGDR, Loshchilov &
    Hutter 2017, without restarts): ``eta_min + (initial_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2``.
    Past ``T_max`` the cosine continues, as in PyTorch's closed form."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        c = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """Runs ``schedulers[i]`` from ``milestones[i-1]`` on, each restarted at its own epoch 0
    (e.g. ``LinearLR`` warm-up, then ``CosineAnnealingLR``)."""

    def __init__(self, optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int], last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: expected {len(schedulers) - 1} milestones for "
                f"{len(schedulers)} schedulers, got {len(milestones)}"
            )
        for s in schedulers:
            if s.optimizer is not optimizer:
                raise ValueError("SequentialLR: every scheduler must drive the same optimizer")
        self._schedulers = list(schedulers)
        self.milestones = list(milestones)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        k = sum(1 for m in self.milestones if epoch >= m)
        start = self.milestones[k - 1] if k else 0
        return self._schedulers[k].lr_at(epoch - start)


class MultiStepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (number of milestones <= epoch)`` (a milestone listed twice
    counts twice, as in PyTorch)."""

    def __init__(self, optimizer, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * self.gamma ** bisect.bisect_right(self.milestones, epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``lr = initial_lr * gamma ** epoch``."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * self.gamma**epoch for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """``lr = initial_lr * factor`` for the first ``total_iters`` epochs, then ``initial_lr``."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        return [base * (self.factor if epoch < self.total_iters else 1.0) for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """``lr = initial_lr * (1 - min(epoch, total_iters) / total_iters) ** power``: a polynomial
    decay to 0 over ``total_iters`` epochs."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        if total_iters <= 0:
            raise ValueError(f"PolynomialLR: total_iters must be positive, got {total_iters}")
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch):
        factor = (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power
        return [base * factor for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR (Loshchilov & Hutter 2017): cosine decay from ``initial_lr`` to ``eta_min`` over a
    period of ``T_i`` epochs, restarted at the end of each period; the first period is ``T_0``
    and each next one ``T_mult`` times longer. ``lr = eta_min + (initial_lr - eta_min) *
    (1 + cos(pi * T_cur / T_i)) / 2``. ``step(epoch)`` accepts a fractional epoch
    (``scheduler.step(epoch + i / iters)`` inside an epoch), as PyTorch documents."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: expected a positive integer T_0, got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"CosineAnnealingWarmRestarts: expected an integer T_mult >= 1, got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected a number eta_min, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def _period(self, epoch) -> tuple:
        """``(T_cur, T_i)`` at ``epoch``: the position in the current period and its length."""
        if epoch < 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: expected a non-negative epoch, got {epoch}")
        if self.T_mult == 1:
            return epoch % self.T_0, self.T_0
        # Walk the periods (exact, where PyTorch's logarithm can land one period short).
        start, period = 0, self.T_0
        while epoch >= start + period:
            start, period = start + period, period * self.T_mult
        return epoch - start, period

    def lr_at(self, epoch):
        self.T_cur, self.T_i = self._period(epoch)
        c = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


def _per_group(name: str, optimizer, value) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"expected {len(optimizer.param_groups)} values for {name}, got {len(value)}")
        return list(value)
    return [value] * len(optimizer.param_groups)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin 2018), stepped after every batch: the rate rises from
    ``max_lr / div_factor`` to ``max_lr`` over the first ``pct_start`` of ``total_steps`` (or
    ``epochs * steps_per_epoch``) steps, then falls to ``initial_lr / final_div_factor``
    (``three_phase``: back to the initial rate first, then down to the minimum), each phase
    annealed by ``anneal_strategy`` ("cos" or "linear"). With ``cycle_momentum`` the momentum
    (SGD's ``momentum``, or Adam's ``beta1``) moves inversely between ``max_momentum`` and
    ``base_momentum``. Rates are PyTorch's closed form of the step number.

    Raises:
        ValueError: no total_steps nor (epochs and steps_per_epoch), a pct_start outside
            [0, 1], an unknown anneal_strategy, cycle_momentum for an optimizer without
            momentum, or stepping past ``total_steps``.
    """

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum=0.85,
        max_momentum=0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ):
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise ValueError(f"OneCycleLR: expected a positive integer total_steps, got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            for what, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(v, int) or v <= 0:
                    raise ValueError(f"OneCycleLR: expected a positive integer {what}, got {v}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("OneCycleLR: define either total_steps or (epochs and steps_per_epoch)")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: expected a float pct_start in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        t = self.total_steps
        if three_phase:
            self.phases = [
                (float(pct_start * t) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (float(2 * pct_start * t) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (t - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self.phases = [
                (float(pct_start * t) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (t - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        groups = optimizer.param_groups
        if last_epoch == -1:
            for g, top in zip(groups, _per_group("max_lr", optimizer, max_lr)):
                g["initial_lr"] = top / div_factor
                g["max_lr"] = top
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    f"OneCycleLR: cycle_momentum needs an optimizer with momentum or betas, "
                    f"{type(optimizer).__name__} has neither"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                tops = _per_group("max_momentum", optimizer, max_momentum)
                bases = _per_group("base_momentum", optimizer, base_momentum)
                for g, top, base in zip(groups, tops, bases):
                    self._set_momentum(g, top)
                    g["max_momentum"], g["base_momentum"] = top, base
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def lr_at(self, epoch):
        if epoch > self.total_steps:
            raise ValueError(
                f"OneCycleLR: tried to step {epoch} times; the specified number of total steps is {self.total_steps}"
            )
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self.phases):
                if epoch <= end or i == len(self.phases) - 1:
                    pct = (epoch - start) / (end - start)
                    lrs.append(self._anneal(g[lr0], g[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(g, self._anneal(g[m0], g[m1], pct))
                    break
                start = end
        return lrs


class CyclicLR(LRScheduler):
    """Cyclical learning rates (Smith 2017, "Cyclical Learning Rates for Training Neural
    Networks"), stepped after every batch, as ``torch.optim.lr_scheduler.CyclicLR``: the rate
    goes from ``base_lr`` up to ``max_lr`` in ``step_size_up`` steps and back in
    ``step_size_down`` (default: the same), the amplitude scaled by ``mode``: ``"triangular"``
    (1), ``"triangular2"`` (halved each cycle) or ``"exp_range"`` (``gamma ** step``), or by
    ``scale_fn(cycle)`` / ``scale_fn(step)`` (``scale_mode`` "cycle" / "iterations"). With
    ``cycle_momentum`` the momentum (SGD's ``momentum``, or Adam's ``beta1``) moves inversely,
    between ``max_momentum`` and ``base_momentum``. Construction sets each group's rate to its
    ``base_lr`` (and momentum to ``max_momentum``). Rates are PyTorch's closed form of the step.

    Raises:
        ValueError: an unknown mode (without scale_fn), a list of base_lr, max_lr or momenta of
            another length than the groups, cycle_momentum for an optimizer without momentum.
    """

    def __init__(
        self,
        optimizer,
        base_lr,
        max_lr,
        step_size_up: int = 2000,
        step_size_down: int | None = None,
        mode: str = "triangular",
        gamma: float = 1.0,
        scale_fn: Callable | None = None,
        scale_mode: str = "cycle",
        cycle_momentum: bool = True,
        base_momentum=0.8,
        max_momentum=0.9,
        last_epoch: int = -1,
    ):
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, g in zip(base_lrs, optimizer.param_groups):
                g["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range', got {mode!r}")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    f"CyclicLR: cycle_momentum needs an optimizer with momentum or betas, "
                    f"{type(optimizer).__name__} has neither"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = _per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for top, base, g in zip(self.max_momentums, self.base_momentums, optimizer.param_groups):
                    self._set_momentum(g, top)
                    g["max_momentum"], g["base_momentum"] = top, base
        self._cyclic_base_lrs = base_lrs
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    _set_momentum = OneCycleLR._set_momentum

    def scale_fn(self, x: float) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        if self.mode == "exp_range":
            return self.gamma**x
        return 1.0

    def lr_at(self, epoch):
        cycle = math.floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else epoch)
        lrs = [base + (top - base) * factor * scale for base, top in zip(self._cyclic_base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for g, base, top in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                self._set_momentum(g, top - (top - base) * factor * scale)
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply the rates by ``factor`` when a metric has stopped improving for more than
    ``patience`` epochs (``step(metric)``, once per epoch); then wait ``cooldown`` epochs
    before counting again. "Improving" is ``mode`` ("min"/"max") by more than ``threshold``,
    relative (``threshold_mode="rel"``) or absolute. No rate goes below its ``min_lr``, and a
    reduction smaller than ``eps`` is skipped. PyTorch's rules, including the state it keeps
    (``best``, ``num_bad_epochs``, ``cooldown_counter``).

    Raises:
        ValueError: ``factor >= 1``, an unknown mode or threshold_mode, or a min_lr list of the
            wrong length.
    """

    def __init__(
        self,
        optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr=0,
        eps: float = 1e-8,
    ):
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode {mode!r} is unknown (expected 'min' or 'max')")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold mode {threshold_mode!r} is unknown ('rel' or 'abs')")
        self.optimizer = optimizer
        self.factor, self.patience, self.cooldown, self.eps = factor, patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.min_lrs = _per_group("min_lr", optimizer, min_lr)
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]
        self.best = math.inf if mode == "min" else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        if self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold) if self.mode == "min" else a > best * (self.threshold + 1.0)
        return a < best - self.threshold if self.mode == "min" else a > best + self.threshold

    def step(self, metrics, epoch: int | None = None) -> None:
        """Record this epoch's ``metrics`` (a number or one-element tensor: a sync point) and
        reduce the rates if it has plateaued."""
        rec = recording.current()
        if rec is not None:
            rec.refuse("ReduceLROnPlateau.step inside the step: its metric is a value the step computes")
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs during the cooldown do not count
        if self.num_bad_epochs > self.patience:
            if len(self.min_lrs) != len(self.optimizer.param_groups):
                if self.default_min_lr is None:
                    raise ValueError(
                        f"ReduceLROnPlateau: {len(self.min_lrs)} min_lrs for "
                        f"{len(self.optimizer.param_groups)} param groups (a group was added); update min_lrs"
                    )
                self.min_lrs = [self.default_min_lr] * len(self.optimizer.param_groups)
            for g, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(g["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


__all__ = [
    "LRScheduler",
    "LambdaLR",
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "ConstantLR",
    "LinearLR",
    "PolynomialLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "CyclicLR",
    "ReduceLROnPlateau",
    "SequentialLR",
]
