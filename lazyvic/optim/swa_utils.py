"""Weight averaging (``torch.optim.swa_utils``): :class:`AveragedModel`, :class:`SWALR`,
:func:`update_bn` and the averaging functions.

Stochastic weight averaging (Izmailov et al. 2018, "Averaging Weights Leads to Wider Optima and
Better Generalization") keeps the running mean of the weights along a run with a constant or
cyclical rate; an exponential moving average (EMA) weights recent values more. PyTorch's rules
throughout: the first update copies, later ones average; buffers follow the model unless
``use_buffers``; integer buffers averaged with ``use_buffers`` are rounded toward zero when
stored, as PyTorch's ``copy_`` into an integer tensor.
"""

from __future__ import annotations

import copy
import itertools
import math
from typing import Callable

from lazyvic import dtypes, modes
from lazyvic.creation import zeros
from lazyvic.nn.module import Module
from lazyvic.nn.normalization import _BatchNorm
from lazyvic.optim.lr_scheduler import LRScheduler, _per_group
from lazyvic.tensor import Tensor


def _floating(t: Tensor) -> Tensor:
    return t if t.dtype.is_floating_point else t.to(dtypes.float64)


def get_ema_avg_fn(decay: float = 0.999) -> Callable:
    """``avg_fn`` of an exponential moving average: ``decay * averaged + (1 - decay) * current``."""

    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged) -> Tensor:
        return _floating(ema_param) * decay + _floating(current_param) * (1 - decay)

    return ema_update


def get_swa_avg_fn() -> Callable:
    """``avg_fn`` of the running mean: ``averaged + (current - averaged) / (num_averaged + 1)``."""

    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged) -> Tensor:
        a = _floating(averaged_param)
        return a + (_floating(current_param) - a) / (_count(num_averaged) + 1)

    return swa_update


def _count(num_averaged) -> float:
    return float(num_averaged.item()) if isinstance(num_averaged, Tensor) else float(num_averaged)


def _lerp_into(targets: list, ends: list, weight: float) -> None:
    """``t <- t + weight * (end - t)`` for floating ``t`` (PyTorch's ``_foreach_lerp_``, which
    computes ``end - (end - t) * (1 - weight)`` from weight 0.5 on), in place."""
    for t, end in zip(targets, ends):
        if weight < 0.5:
            t._assign(t + (end - t) * weight)
        else:
            t._assign(end - (end - t) * (1 - weight))


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable:
    """``multi_avg_fn`` of an exponential moving average: updates the averaged tensors in place."""

    def ema_update(ema_param_list: list, current_param_list: list, _num_averaged) -> None:
        with modes.no_grad():
            if ema_param_list and ema_param_list[0].dtype.is_floating_point:
                _lerp_into(ema_param_list, current_param_list, 1 - decay)
            else:
                for p_ema, p_model in zip(ema_param_list, current_param_list):
                    p_ema._assign(_floating(p_ema) * decay + _floating(p_model) * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn() -> Callable:
    """``multi_avg_fn`` of the running mean: updates the averaged tensors in place."""

    def swa_update(averaged_param_list: list, current_param_list: list, num_averaged) -> None:
        n = _count(num_averaged)
        with modes.no_grad():
            if averaged_param_list and averaged_param_list[0].dtype.is_floating_point:
                _lerp_into(averaged_param_list, current_param_list, 1 / (n + 1))
            else:
                for a, p in zip(averaged_param_list, current_param_list):
                    a._assign(_floating(a) + (_floating(p) - _floating(a)) / (n + 1))

    return swa_update


class AveragedModel(Module):
    """A copy of ``model`` whose parameters are the average of the values passed to
    :meth:`update_parameters`, as ``torch.optim.swa_utils.AveragedModel``: the running mean by
    default (SWA), or ``avg_fn(averaged, current, num_averaged) -> tensor`` per tensor, or
    ``multi_avg_fn(averaged_list, current_list, num_averaged)`` updating lists in place (e.g.
    :func:`get_ema_multi_avg_fn`). ``use_buffers=True`` averages the buffers too (BatchNorm's
    statistics); otherwise they are copied from ``model`` at each update (then call
    :func:`update_bn` after training). Calling it calls the copy.

    state_dict: ``n_averaged`` (int64 buffer, the number of updates) and ``module.<name>``.

    Raises:
        ValueError: both ``avg_fn`` and ``multi_avg_fn`` given.
    """

    def __init__(
        self,
        model: Module,
        device=None,
        avg_fn: Callable | None = None,
        multi_avg_fn: Callable | None = None,
        use_buffers: bool = False,
    ):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError("AveragedModel: only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", zeros((), dtype=dtypes.int64, device=device))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _tensors(self, model: Module) -> list:
        if self.use_buffers:
            return list(itertools.chain(model.parameters(), model.buffers()))
        return list(model.parameters())

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current parameters (and buffers with ``use_buffers``) into the average."""
        mine = self._tensors(self.module)
        theirs = [t.detach().to(a.device) for a, t in zip(mine, self._tensors(model))]
        n = int(self.n_averaged.item())  # a sync, as PyTorch's ``n_averaged == 0``
        with modes.no_grad():
            if n == 0:
                for a, t in zip(mine, theirs):
                    a._assign(t)
            elif self.avg_fn is not None:
                for a, t in zip(mine, theirs):
                    a._assign(self.avg_fn(a.detach(), t, self.n_averaged))
            else:
                # PyTorch groups the tensors by device and dtype before a multi_avg_fn
                fn = self.multi_avg_fn or get_swa_multi_avg_fn()
                groups: dict = {}
                for a, t in zip(mine, theirs):
                    groups.setdefault((a.device, a.dtype), ([], []))
                    groups[(a.device, a.dtype)][0].append(a)
                    groups[(a.device, a.dtype)][1].append(t)
                for averaged, current in groups.values():
                    fn(averaged, current, self.n_averaged)
            if not self.use_buffers:
                for b, src in zip(self.module.buffers(), model.buffers()):
                    b._assign(src.detach().to(b.device))
            self.n_averaged.add_(1)


class SWALR(LRScheduler):
    """The rate schedule of SWA, as ``torch.optim.swa_utils.SWALR``: each group's rate is annealed
    from its current value to ``swa_lr`` over ``anneal_epochs`` steps ("cos" or "linear"), then
    held. PyTorch's rule, which reads the group's current rate at each step (so it follows a
    change made by another scheduler): ``lr = swa_lr * a(t) + lr0 * (1 - a(t))``, ``t = step /
    anneal_epochs`` clipped to [0, 1], ``a`` the anneal function, ``lr0`` recovered from the
    current rate and the previous ``a``.

    Raises:
        ValueError: an anneal_strategy other than "cos" and "linear", a negative or non-integer
            anneal_epochs, a list of swa_lr of another length than the groups.
    """

    def __init__(self, optimizer, swa_lr, anneal_epochs: int = 10, anneal_strategy: str = "cos", last_epoch: int = -1):
        for lr, g in zip(_per_group("swa_lr", optimizer, swa_lr), optimizer.param_groups):
            g["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"SWALR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"SWALR: anneal_epochs must be a non-negative integer, got {anneal_epochs!r}")
        self.anneal_strategy, self.anneal_epochs = anneal_strategy, anneal_epochs
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2 if self.anneal_strategy == "cos" else t

    def lr_at(self, epoch):
        step = max(1, epoch) if self.anneal_epochs == 0 else epoch
        prev_alpha = self._anneal(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        alpha = self._anneal(max(0, min(1, step / max(1, self.anneal_epochs))))
        lrs = []
        for g in self.optimizer.param_groups:
            lr0 = g["swa_lr"] if prev_alpha == 1 else (g["lr"] - prev_alpha * g["swa_lr"]) / (1 - prev_alpha)
            lrs.append(g["swa_lr"] * alpha + lr0 * (1 - alpha))
        return lrs


def update_bn(loader, model: Module, device=None) -> None:
    """Recompute the running statistics of every BatchNorm in ``model`` over one pass of
    ``loader`` (batches, or tuples/lists whose first item is the input), as
    ``torch.optim.swa_utils.update_bn``: statistics reset, momentum None (a cumulative mean over
    the batches) during the pass, restored after; the model's training flag restored; no grad."""
    momenta = {}
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.reset_running_stats()
            momenta[m] = m.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for m in momenta:
        m.momentum = None
    with modes.no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for m, momentum in momenta.items():
        m.momentum = momentum
    model.train(was_training)


__all__ = [
    "AveragedModel",
    "SWALR",
    "update_bn",
    "get_ema_avg_fn",
    "get_ema_multi_avg_fn",
    "get_swa_avg_fn",
    "get_swa_multi_avg_fn",
]
