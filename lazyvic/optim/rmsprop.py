"""RMSprop (``torch.optim.RMSprop``)."""

from __future__ import annotations

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class RMSprop(Optimizer):
    """RMSprop (Hinton, Coursera lecture 6.5) with PyTorch's update:
    ``g += weight_decay * p``; ``s = alpha s + (1 - alpha) g^2``; centered: ``a = alpha a +
    (1 - alpha) g`` and ``avg = sqrt(s - a^2) + eps``, else ``avg = sqrt(s) + eps``; with
    momentum ``buf = momentum buf + g / avg``, ``p -= lr buf``, else ``p -= lr g / avg``.
    State: ``step``, ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg`` (centered).

    Raises:
        ValueError: a negative lr, eps, momentum or weight_decay, or alpha outside [0, 1].
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ):
        check_hyperparameters("RMSprop", lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            capturable=capturable,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
        )
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = 0
        st["square_avg"] = self._zeros(p)
        if group["momentum"] > 0:
            st["momentum_buffer"] = self._zeros(p)
        if group["centered"]:
            st["grad_avg"] = self._zeros(p)

    def _hyper(self, group, st):
        st["step"] += 1
        return (group["lr"],)

    def _update(self, p, grad, group, st, h):
        decay, lr = h
        alpha, mom = group["alpha"], group["momentum"]
        grad = self._weight_decay(p, grad, group, decay)
        square_avg = st["square_avg"]._assign(st["square_avg"] * alpha + grad * grad * (1 - alpha))
        if group["centered"]:
            grad_avg = st["grad_avg"]._assign(st["grad_avg"] * alpha + grad * (1 - alpha))
            avg = (square_avg - grad_avg * grad_avg).sqrt() + group["eps"]
        else:
            avg = square_avg.sqrt() + group["eps"]
        if mom > 0:
            buf = st["momentum_buffer"]._assign(st["momentum_buffer"] * mom + grad / avg)
            p._assign(p - buf * lr)
        else:
            p._assign(p - grad / avg * lr)


__all__ = ["RMSprop"]
