"""Distance modules and the losses built on them (PyTorch's names, arguments, defaults and
attribute names): CosineSimilarity, PairwiseDistance, CosineEmbeddingLoss, TripletMarginLoss.
Each calls its function in ``lazyvic.functional.distance``."""

from __future__ import annotations

from lazyvic.errors import ArgumentError
from lazyvic.functional.distance import (
    cosine_embedding_loss,
    cosine_similarity,
    pairwise_distance,
    triplet_margin_loss,
)
from lazyvic.nn.loss import _Loss
from lazyvic.nn.module import Module
from lazyvic.tensor import Tensor


class CosineSimilarity(Module):
    """Cosine similarity of x1 and x2 along ``dim`` (``F.cosine_similarity``), as
    ``torch.nn.CosineSimilarity``: inputs broadcasting to (*, D, *) give (*, *)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return cosine_similarity(x1, x2, self.dim, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"


class PairwiseDistance(Module):
    """``||x1 - x2 + eps||_p`` over the last axis (``F.pairwise_distance``), as
    ``torch.nn.PairwiseDistance``; the norm's order is the attribute ``norm``, PyTorch's name."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)

    def extra_repr(self) -> str:
        return f"p={self.norm}, eps={self.eps}, keepdim={self.keepdim}"


class CosineEmbeddingLoss(_Loss):
    """Cosine embedding loss with ``margin`` (``F.cosine_embedding_loss``): inputs (N, D) and
    target (N,) of 1 / -1, or (D,) and a 0-d target."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """Triplet margin loss (``F.triplet_margin_loss``) with ``margin``, norm ``p``, ``eps`` and
    ``swap``. Raises ArgumentError (a ValueError, as PyTorch) for ``margin <= 0``."""

    def __init__(
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
    ):
        super().__init__(size_average, reduce, reduction)
        if not margin > 0:
            raise ArgumentError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap, reduction=self.reduction
        )
