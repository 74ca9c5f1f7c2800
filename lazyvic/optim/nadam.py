"""NAdam (``torch.optim.NAdam``)."""

from __future__ import annotations

import numpy as np

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat 2016), with PyTorch's momentum schedule
    ``mu_t = b1 (1 - 0.5 * 0.96^(t * momentum_decay))``: ``m``, ``v`` as in Adam;
    ``denom = sqrt(v / (1 - b2^t)) + eps``;
    ``p -= lr (1 - mu_t) / (1 - prod mu) * g / denom + lr mu_{t+1} / (1 - prod mu * mu_{t+1}) * m / denom``.
    Weight decay is L2, or decoupled with ``decoupled_weight_decay=True``.
    State: ``step``, ``mu_product`` (a number, accumulated in float32 as PyTorch's 0-d tensor),
    ``exp_avg``, ``exp_avg_sq``.

    Raises:
        ValueError: a negative lr, eps, weight_decay or momentum_decay, or betas outside [0, 1).
    """

    scalar_state = ("step", "mu_product")

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ):
        check_hyperparameters(
            "NAdam", lr=lr, eps=eps, betas=betas, weight_decay=weight_decay, momentum_decay=momentum_decay
        )
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["mu_product"] = 1.0
        st["exp_avg"] = self._zeros(p)
        st["exp_avg_sq"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        t = st["step"]
        lr, (b1, b2), decay = group["lr"], group["betas"], group["momentum_decay"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * decay))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * decay))
        mu_product = float(np.float32(st["mu_product"]) * np.float32(mu))
        st["mu_product"] = mu_product
        grad_coef = -lr * (1.0 - mu) / (1.0 - mu_product)
        avg_coef = -lr * mu_next / (1.0 - mu_product * mu_next)
        return 1 - b2**t, grad_coef, avg_coef

    def _update(self, p, grad, group, st, h):
        decay, bc2, grad_coef, avg_coef = h
        b1, b2 = group["betas"]
        grad = self._weight_decay(p, grad, group, decay)
        m, v = self._adam_moments(st, grad, b1, b2)
        denom = (v / bc2).sqrt() + group["eps"]
        p._assign(p + grad * grad_coef / denom + m * avg_coef / denom)


__all__ = ["NAdam"]
