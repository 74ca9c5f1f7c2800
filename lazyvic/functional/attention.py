"""Scaled dot-product attention (``torch.nn.functional.scaled_dot_product_attention``) and the
key/value cache of autoregressive decoding (:class:`KVCache`)."""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.creation import band_mask
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.functional.activation import softmax
from lazyvic.functional.linear import dropout
from lazyvic.indexing import cat
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


class KVCache:
    """The keys and values of the tokens seen so far, one pair per attention layer.

    Autoregressive decoding computes the query, key and value of the *new* tokens only;
    ``update`` appends their keys and values (``(..., T_new, E)``, along the sequence axis -2)
    to those of the earlier tokens and returns the whole ``(..., T_past + T_new, E)``. The
    sequence grows by a token per step, so every step has new sizes: one plan of symbolic sizes
    serves them all (automatic dynamic shapes). Pass it to :func:`scaled_dot_product_attention`
    (``kv_cache=``), ``nn.MultiheadAttention`` or ``lazyvic.models.TinyGPT``; a model with several
    layers uses one ``layer`` index each.
    """

    def __init__(self):
        self.layers: dict = {}

    def update(self, key: Tensor, value: Tensor, layer: int = 0) -> tuple:
        """Append ``key`` and ``value`` for ``layer``; returns all keys and values so far.

        Raises ShapeError when the new keys do not fit the cached ones (other batch, heads or
        embedding size)."""
        past = self.layers.get(layer)
        if past is not None:
            pk, pv = past
            if pk.shape[:-2] != key.shape[:-2] or pk.shape[-1] != key.shape[-1] or pv.shape[-1] != value.shape[-1]:
                raise ShapeError(
                    f"KVCache.update: new keys {key.shape} / values {value.shape} do not fit the cached "
                    f"{pk.shape} / {pv.shape} of layer {layer}"
                )
            key, value = cat([pk, key], -2), cat([pv, value], -2)
        self.layers[layer] = (key, value)
        return key, value

    def length(self, layer: int = 0) -> int:
        """How many tokens ``layer`` has seen (0 before the first update)."""
        past = self.layers.get(layer)
        return 0 if past is None else past[0].shape[-2]

    def reset(self) -> None:
        """Forget every token (a new sequence)."""
        self.layers.clear()

    def __repr__(self) -> str:
        return f"KVCache(layers={len(self.layers)}, length={self.length(min(self.layers, default=0))})"


def _causal_mask_offset(L: int, S: int, device: str) -> Tensor:
    """(L, S) bool for L new queries after S - L cached tokens: key j is visible to query i when
    j <= i + S - L (causal, aligned to the end: the last query sees every key)."""
    key = ("offset", L, S, device)
    m = _causal_masks.get(key)
    if m is None:
        m = _causal_masks[key] = band_mask(L, S, diagonal=S - L, device=device)
    return m


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    kv_cache: KVCache | None = None,
    layer: int = 0,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` (Vaswani et al. 2017; PyTorch's function).

    Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); leading
    dimensions broadcast (e.g. (B, H, T, D)). ``scale`` defaults to ``1/sqrt(E)``.
    ``attn_mask``: bool (True = may attend) or float (added to the scores), broadcastable
    to (..., L, S). ``is_causal``: key j is visible to query i when j <= i. ``dropout_p``
    drops attention weights (always, as PyTorch's function does: pass 0 in eval).
    ``enable_gqa``: key and value may have fewer heads (dim -3) than query, which then share
    them in groups (PyTorch 2.5's grouped-query attention).

    ``kv_cache`` (a lazyvic extension for decoding): ``key`` and ``value`` are those of the new
    tokens only; they are appended to the cache's ``layer`` (:class:`KVCache`) and the query
    attends to every cached token too; ``is_causal`` then aligns the causal mask to the end (new
    query i, at position ``S - L + i``, sees keys ``j <= S - L + i``).

    Raises ShapeError on mismatched shapes and ValueError when both ``attn_mask`` and
    ``is_causal`` are given.
    """
    if kv_cache is not None:
        key, value = kv_cache.update(key, value, layer)
    if enable_gqa and key.ndim >= 3 and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        groups, rem = divmod(query.shape[-3], key.shape[-3])
        if rem:
            raise ShapeError(
                f"scaled_dot_product_attention: enable_gqa needs query heads ({query.shape[-3]}) to be a "
                f"multiple of key heads ({key.shape[-3]})"
            )
        key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
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
    if is_causal and kv_cache is not None and S != L:
        scores = where(_causal_mask_offset(L, S, scores.device), scores, -math.inf)
    elif is_causal:
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
