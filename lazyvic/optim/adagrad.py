"""Adagrad (``torch.optim.Adagrad``)."""

from __future__ import annotations

from lazyvic.optim.optimizer import Optimizer, check_hyperparameters


class Adagrad(Optimizer):
    """Adagrad (Duchi et al. 2011) with PyTorch's update: ``g += weight_decay * p``;
    ``clr = lr / (1 + (t - 1) lr_decay)``; ``sum += g^2``; ``p -= clr g / (sqrt(sum) + eps)``.
    As in PyTorch the state (``step`` 0 and ``sum`` filled with ``initial_accumulator_value``)
    is made when a parameter group is added, not at the first step.

    Raises:
        ValueError: a negative lr, lr_decay, weight_decay, initial_accumulator_value or eps.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        check_hyperparameters(
            "Adagrad",
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
        )
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults)

    def _init_group_state(self, group: dict) -> None:
        for p in group["params"]:
            st = self._state(p)
            if not st:
                st["step"] = 0
                st["sum"] = self._zeros(p, group["initial_accumulator_value"])

    def _init_state(self, p, group, st):  # a state dict loaded without this parameter's entry
        self._init_group_state({"params": [p], **group})

    def _hyper(self, group, st):
        st["step"] += 1
        return (group["lr"] / (1 + (st["step"] - 1) * group["lr_decay"]),)

    def _update(self, p, grad, group, st, h):
        decay, clr = h
        grad = self._weight_decay(p, grad, group, decay)
        state_sum = st["sum"]._assign(st["sum"] + grad * grad)
        p._assign(p - grad / (state_sum.sqrt() + group["eps"]) * clr)


__all__ = ["Adagrad"]
