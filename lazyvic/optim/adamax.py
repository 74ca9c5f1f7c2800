"""Adamax (``torch.optim.Adamax``)."""

from __future__ import annotations

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class Adamax(Optimizer):
    """Adamax, Adam with the infinity norm (Kingma & Ba 2015, section 7.1), with PyTorch's
    update: ``g += weight_decay * p``; ``m = b1 m + (1 - b1) g``;
    ``u = max(b2 u, |g| + eps)``; ``p -= lr / (1 - b1^t) * m / u``.
    State: ``step``, ``exp_avg``, ``exp_inf``.

    Raises:
        ValueError: a negative lr, eps or weight_decay, or betas outside [0, 1).
    """

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ):
        check_hyperparameters("Adamax", lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["exp_avg"] = self._zeros(p)
        st["exp_inf"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        return (group["lr"] / (1 - group["betas"][0] ** st["step"]),)

    def _update(self, p, grad, group, st, h):
        decay, clr = h
        (b1, b2), eps = group["betas"], group["eps"]
        grad = self._weight_decay(p, grad, group, decay)
        m = st["exp_avg"]._assign(st["exp_avg"] * b1 + grad * (1 - b1))
        u = st["exp_inf"]._assign((st["exp_inf"] * b2).maximum(grad.abs() + eps))
        p._assign(p - m / u * clr)


__all__ = ["Adamax"]
