"""Adam (``torch.optim.Adam``), with AMSGrad and (optionally) decoupled weight decay."""

from __future__ import annotations

import math

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015) with PyTorch's bias correction:
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``. ``amsgrad`` uses the running
    maximum of ``v`` (Reddi et al. 2018); weight decay is L2 (added to the gradient), or
    decoupled (``p *= 1 - lr * wd``, AdamW) with ``decoupled_weight_decay=True``.
    State: ``step``, ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq`` with amsgrad).

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
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ):
        check_hyperparameters(type(self).__name__, lr=lr, eps=eps, betas=betas, weight_decay=weight_decay)
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["exp_avg"] = self._zeros(p)
        st["exp_avg_sq"] = self._zeros(p)
        if group["amsgrad"]:
            st["max_exp_avg_sq"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        t = st["step"]
        b1, b2 = group["betas"]
        return group["lr"] / (1 - b1**t), 1.0 / math.sqrt(1 - b2**t)  # step size, 1 / sqrt(bc2)

    def _update(self, p, grad, group, st, h):
        decay, step_size, inv_sqrt_bc2 = h
        (b1, b2), eps = group["betas"], group["eps"]
        grad = self._weight_decay(p, grad, group, decay)
        m, v = self._adam_moments(st, grad, b1, b2)
        if group["amsgrad"]:
            v = st["max_exp_avg_sq"]._assign(st["max_exp_avg_sq"].maximum(v))
        p._assign(p - m * step_size / (v.sqrt() * inv_sqrt_bc2 + eps))


__all__ = ["Adam"]
