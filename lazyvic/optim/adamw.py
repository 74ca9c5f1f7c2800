"""AdamW (``torch.optim.AdamW``): Adam with decoupled weight decay."""

from __future__ import annotations

from lazyvic.optim.adam import Adam


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter 2019): Adam whose weight decay shrinks the parameters
    directly (``p *= 1 - lr * weight_decay``) instead of adding to the gradient; default
    weight_decay 0.01. Same state and checks as :class:`Adam` (amsgrad included)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )


__all__ = ["AdamW"]
