"""RAdam (``torch.optim.RAdam``)."""

from __future__ import annotations

import math

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class RAdam(Optimizer):
    """Rectified Adam (Liu et al. 2020), with PyTorch's update: ``m``, ``v`` as in Adam;
    ``rho_inf = 2 / (1 - b2) - 1``, ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)``; when
    ``rho_t > 5``: ``p -= lr m / (1 - b1^t) * r_t * sqrt(1 - b2^t) / (sqrt(v) + eps)`` with the
    rectification ``r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))``,
    else ``p -= lr m / (1 - b1^t)``. Both cases are one expression with per-step scalar
    coefficients, so the early steps reuse the later steps' plan. Weight decay is L2, or
    decoupled with ``decoupled_weight_decay=True``. State: ``step``, ``exp_avg``, ``exp_avg_sq``.

    Raises:
        ValueError: a negative lr, eps or weight_decay, or betas outside [0, 1).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        check_hyperparameters("RAdam", lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            decoupled_weight_decay=decoupled_weight_decay,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["exp_avg"] = self._zeros(p)
        st["exp_avg_sq"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        t = st["step"]
        lr, (b1, b2) = group["lr"], group["betas"]
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2**t) / bc2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive, plain = lr / bc1 * rect * math.sqrt(bc2), 0.0
        else:
            adaptive, plain = 0.0, lr / bc1
        return adaptive, plain

    def _update(self, p, grad, group, st, h):
        decay, adaptive, plain = h
        b1, b2 = group["betas"]
        grad = self._weight_decay(p, grad, group, decay)
        m, v = self._adam_moments(st, grad, b1, b2)
        p._assign(p - m * adaptive / (v.sqrt() + group["eps"]) - m * plain)


__all__ = ["RAdam"]
