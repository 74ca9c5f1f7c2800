"""Adadelta (``torch.optim.Adadelta``)."""

from __future__ import annotations

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012) with PyTorch's update: ``g += weight_decay * p``;
    ``s = rho s + (1 - rho) g^2``; ``delta = sqrt(u + eps) / sqrt(s + eps) * g``;
    ``u = rho u + (1 - rho) delta^2``; ``p -= lr delta`` (lr 1.0 by default).
    State: ``step``, ``square_avg``, ``acc_delta``.

    Raises:
        ValueError: a negative lr, eps or weight_decay, or rho outside [0, 1].
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        check_hyperparameters("Adadelta", lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        defaults = dict(
            lr=lr,
            rho=rho,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            capturable=capturable,
            foreach=foreach,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["square_avg"] = self._zeros(p)
        st["acc_delta"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        return (group["lr"],)

    def _update(self, p, grad, group, st, h):
        decay, lr = h
        rho, eps = group["rho"], group["eps"]
        grad = self._weight_decay(p, grad, group, decay)
        square_avg = st["square_avg"]._assign(st["square_avg"] * rho + grad * grad * (1 - rho))
        delta = (st["acc_delta"] + eps).sqrt() / (square_avg + eps).sqrt() * grad
        st["acc_delta"]._assign(st["acc_delta"] * rho + delta * delta * (1 - rho))
        p._assign(p - delta * lr)


__all__ = ["Adadelta"]
