"""Scaled dot-product attention (``torch.nn.functional.scaled_dot_product_attention``)."""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.creation import band_mask
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.functional.activation import softmax
from lazyvic.functional.linear import dropout
from lazyvic.shapes import broadcast_shapes
from lazyvic.tensor import Tensor, where

_causal_masks: dict = {}


def _causal_mask(L: int, S: int, device: str = "cpu") -> Tensor:
    """(L, S) bool, True where query i may attend to key j (j <= i; top-left aligned, as PyTorch).

    One realized tensor per shape and device, so every step reads the same input and keeps one plan."""
    m = _causal_masks.get((L, S, device))
    if m is None:
        m = _causal_masks[(L, S, device)] = band_mask(L, S, device=device)
    return m


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` (Vaswani et al. 2017; PyTorch's function).

    Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); leading
    dimensions broadcast (e.g. (B, H, T, D)). ``scale`` defaults to ``1/sqrt(E)``.
    ``attn_mask``: bool (True = may attend) or float (added to the scores), broadcastable
    to (..., L, S). ``is_causal``: key j is visible to query i when j <= i. ``dropout_p``
    drops attention weights (always, as PyTorch's function does: pass 0 in eval).

    Raises ShapeError on mismatched shapes and ValueError when both ``attn_mask`` and
    ``is_causal`` are given.
    """
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError(
            f"scaled_dot_product_attention: query, key and value need at least 2 dims, got "
            f"{query.shape}, {key.shape}, {value.shape}"
        )
    L, E = query.shape[-2:]
    S = key.shape[-2]
    if key.shape[-1] != E or value.shape[-2] != S:
        raise ShapeError(
            f"scaled_dot_product_attention: expected query (..., L, E), key (..., S, E), value "
            f"(..., S, Ev); got {query.shape}, {key.shape}, {value.shape}"
        )
    try:
        batch = broadcast_shapes(broadcast_shapes(query.shape[:-2], key.shape[:-2]), value.shape[:-2])
    except ShapeError:
        raise ShapeError(
            f"scaled_dot_product_attention: the batch dimensions of query {query.shape}, key "
            f"{key.shape} and value {value.shape} do not broadcast together"
        ) from None
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    scores = (query @ key.transpose(-2, -1)) * (1.0 / math.sqrt(E) if scale is None else scale)
    if is_causal:
        scores = where(_causal_mask(L, S, scores.device), scores, -math.inf)
    elif attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            attn_mask = Tensor(np.asarray(attn_mask)).to(scores.device)
        scores_shape = batch + (L, S)
        try:
            fits = broadcast_shapes(attn_mask.shape, scores_shape) == scores_shape
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(
                f"scaled_dot_product_attention: attn_mask of shape {attn_mask.shape} does not "
                f"broadcast to the scores' shape {scores_shape}"
            )
        if attn_mask.dtype.category == 1:
            raise DTypeError(
                f"scaled_dot_product_attention: attn_mask must be bool or floating point, got {attn_mask.dtype.name}"
            )
        if attn_mask.dtype is dt.bool_:
            scores = where(attn_mask, scores, -math.inf)
        else:
            scores = scores + attn_mask.to(scores.dtype)
    attn = softmax(scores, -1)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p)
    return attn @ value
