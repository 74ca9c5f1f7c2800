"""Loss modules (PyTorch's names, arguments and defaults); each calls its ``F.`` function.

As in PyTorch, a class ``weight`` (and BCEWithLogitsLoss's ``pos_weight``) is a buffer, so it is
in the ``state_dict`` and moves with ``.to()``; the deprecated ``size_average``/``reduce`` set
``reduction`` once, at construction.
"""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.functional.loss import _reduction
from lazyvic.nn.module import Module
from lazyvic.tensor import Tensor


class _Loss(Module):
    _allowed = ("none", "mean", "sum")

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = _reduction(type(self).__name__, size_average, reduce, reduction, self._allowed)

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class _WeightedLoss(_Loss):
    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class L1Loss(_Loss):
    """Mean absolute error (``F.l1_loss``)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error (``F.mse_loss``)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Smooth L1 with threshold ``beta`` (``F.smooth_l1_loss``)."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Huber loss with threshold ``delta`` (``F.huber_loss``)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(_Loss):
    """KL divergence of log-probabilities ``input`` from ``target`` (``F.kl_div``); reduction may
    also be ``'batchmean'``."""

    _allowed = ("none", "mean", "sum", "batchmean")

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of log-probabilities (``F.nll_loss``)."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross-entropy of logits against class indices or class probabilities (``F.cross_entropy``)."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities (``F.binary_cross_entropy``)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits (``F.binary_cross_entropy_with_logits``); ``weight`` and
    ``pos_weight`` are buffers."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, weight=self.weight, reduction=self.reduction, pos_weight=self.pos_weight
        )
