"""SGD (``torch.optim.SGD``): momentum, dampening, Nesterov and L2 weight decay."""

from __future__ import annotations

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's update rule (Sutskever et al. 2013 momentum):
    ``g += weight_decay * p``; ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` at
    the first step); ``g = g + momentum * buf`` (Nesterov) or ``buf``; ``p -= lr * g``.
    State: ``momentum_buffer`` (with momentum). ``maximize`` ascends.

    Raises:
        ValueError: a negative lr, momentum or weight_decay; Nesterov without momentum or with
            dampening.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        check_hyperparameters("SGD", lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)

    def _update(self, p, grad, group, st, h):
        decay, lr = h
        grad = self._weight_decay(p, grad, group, decay)
        mom = group["momentum"]
        if mom:
            buf = st.get("momentum_buffer")
            if buf is None and group["dampening"] == 0:
                # PyTorch starts with buf = grad; 0 * momentum + grad is the same value, and it
                # keeps the first step's trace identical to every later step's (one plan).
                buf = self._zeros(p)
            # A new handle, as PyTorch clones: an in-place change of p.grad must not reach the buffer.
            buf = grad.detach() if buf is None else buf * mom + grad * (1 - group["dampening"])
            st["momentum_buffer"] = buf
            grad = grad + buf * mom if group["nesterov"] else buf
        p._assign(p - grad * lr)


__all__ = ["SGD"]
