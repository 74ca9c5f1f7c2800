"""Rprop (``torch.optim.Rprop``)."""

from __future__ import annotations

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters
from lazyvic.tensor import where


class Rprop(Optimizer):
    """Resilient backpropagation (Riedmiller & Braun 1993, "A direct adaptive method for faster
    backpropagation learning: the RPROP algorithm") with PyTorch's update: each element has its
    own step size, multiplied by ``etaplus`` where the gradient kept its sign since the last step
    and by ``etaminus`` where it flipped, then clamped to ``step_sizes``; where it flipped the
    gradient counts as 0 (no move, and no sign to compare next time); ``p -= sign(g) * step``.

    State: ``prev`` (the last gradient used), ``step_size`` (starting at ``lr``: later changes of
    the group's lr do not reach it, as in PyTorch), ``step``. ``maximize`` ascends.

    Raises:
        ValueError: a negative lr, or etas not in 0 < etaminus < 1 < etaplus.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        etas: tuple = (0.5, 1.2),
        step_sizes: tuple = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        check_hyperparameters("Rprop", lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Rprop: invalid eta values: {tuple(etas)} (expected 0 < etaminus < 1 < etaplus)")
        defaults = dict(
            lr=lr,
            etas=tuple(etas),
            step_sizes=tuple(step_sizes),
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["prev"] = self._zeros(p)
        st["step_size"] = self._zeros(p, group["lr"])

    def _hyper(self, group, st):
        st["step"] += 1
        return ()

    def _update(self, p, grad, group, st, h):
        etaminus, etaplus = group["etas"]
        smallest, largest = group["step_sizes"]
        sign = (grad * st["prev"]).sign()
        size = st["step_size"]
        grown = where(sign > 0, size * etaplus, where(sign < 0, size * etaminus, size))
        step_size = size._assign(grown.clamp(smallest, largest))
        grad = where(sign < 0, 0.0, grad)
        p._assign(p - grad.sign() * step_size)
        st["prev"]._assign(grad)


__all__ = ["Rprop"]
