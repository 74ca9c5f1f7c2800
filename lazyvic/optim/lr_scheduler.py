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

import math
from typing import Callable, Sequence


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

    def step(self) -> None:
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self.lr_at(self.last_epoch)):
            g["lr"] = float(lr)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
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


__all__ = ["LRScheduler", "LambdaLR", "StepLR", "LinearLR", "CosineAnnealingLR", "SequentialLR"]
