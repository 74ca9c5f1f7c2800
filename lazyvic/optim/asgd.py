"""ASGD (``torch.optim.ASGD``)."""

from __future__ import annotations

import numpy as np

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


def _f32(x: float) -> float:
    """``x`` rounded to float32: PyTorch keeps ``eta`` and ``mu`` in 0-d tensors of its default
    scalar dtype, float32, whatever the parameters' dtype."""
    return float(np.float32(x))


class ASGD(Optimizer):
    """Averaged stochastic gradient descent (Polyak & Juditsky 1992, "Acceleration of stochastic
    approximation by averaging") with PyTorch's update: ``g += weight_decay * p``;
    ``p = p * (1 - lambd * eta) - eta * g``; the average ``ax`` follows ``p`` until step ``t0``,
    then averages it (``ax += mu * (p - ax)``, computed as ``ax * (1 - mu) + p * mu``, which is
    exactly ``p`` while ``mu`` is 1); then ``eta = lr / (1 + lambd * lr * step) ** alpha`` and
    ``mu = 1 / max(1, step - t0)`` for the next step.

    State: ``step``, ``eta`` and ``mu`` (numbers; PyTorch keeps 0-d tensors), ``ax`` (the
    averaged parameters, for evaluation: copy them into the model yourself, as with PyTorch).
    ``eta`` starts at ``lr``; later changes of the group's lr enter only through the formula.
    ``eta`` and ``mu`` are rounded to float32 when stored, as PyTorch's.

    Raises:
        ValueError: a negative lr, lambd or weight_decay.
    """

    scalar_state = ("step", "eta", "mu")

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        check_hyperparameters("ASGD", lr=lr, lambd=lambd, weight_decay=weight_decay)
        defaults = dict(
            lr=lr,
            lambd=lambd,
            alpha=alpha,
            t0=t0,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["eta"] = _f32(group["lr"])
        st["mu"] = 1.0
        st["ax"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        eta, mu = st["eta"], st["mu"]
        lr, lambd, step = group["lr"], group["lambd"], st["step"]
        st["eta"] = _f32(lr / (1 + lambd * lr * step) ** group["alpha"])
        st["mu"] = _f32(1 / max(1, step - group["t0"]))
        return (1 - lambd * eta, eta, 1 - mu, mu)

    def _update(self, p, grad, group, st, h):
        _, shrink, eta, keep, mu = h
        if group["weight_decay"]:
            grad = grad + p * group["weight_decay"]
        p._assign(p * shrink - grad * eta)
        st["ax"]._assign(st["ax"] * keep + p * mu)


__all__ = ["ASGD"]
