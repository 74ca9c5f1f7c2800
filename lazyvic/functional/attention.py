"""Scaled dot-product attention (``torch.nn.functional.scaled_dot_product_attention``) and the
key/value cache of autoregressive decoding (:class:`KVCache`)."""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.creation import arange, band_mask, tensor, zeros
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
    ``update`` adds their keys and values (``(..., T_new, E)``, sequence axis -2) to those of
    the earlier tokens. Pass the cache to :func:`scaled_dot_product_attention` (``kv_cache=``),
    ``nn.MultiheadAttention`` or ``lazyvic.models.TinyGPT``; a model with several layers uses
    one ``layer`` index each. Two layouts:

    - ``KVCache()`` (growing): ``update`` returns the ``(..., T_past + T_new, E)`` keys and values
      so far. Every step has new sizes; one plan of symbolic sizes serves them all (automatic
      dynamic shapes).
    - ``KVCache(max_length=M)`` (static, as Hugging Face's ``StaticCache``): each layer keeps
      ``(..., M, E)`` buffers and its position (tokens seen) as an int64 tensor, so the position
      is data, not code: every decoding step has the same shapes and the same trace (one plan,
      and a ``lazyvic.compile`` replay without recording). ``update`` writes the new rows at
      the position and returns the whole buffers; the attention masks the slots not yet
      written (:meth:`visible`). :meth:`state` and :meth:`from_state` carry the cache through a
      compiled step function as tensors.

    Raises ShapeError when new keys do not fit the cached ones, and (static) when they would
    pass ``max_length`` — checked where the position is known in Python; inside a compiled step
    (:meth:`from_state`) a write past the end is dropped and the position embedding's index
    check reports it.
    """

    def __init__(self, max_length: int | None = None):
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"KVCache: max_length must be a positive int or None, got {max_length!r}")
        self.max_length = max_length
        self.layers: dict = {}  # layer -> (keys, values) (growing) or (keys, values, position) (static)
        self._seen: dict = {}  # layer -> tokens seen, as a Python int where known (static)
        self._before: dict = {}  # layer -> (position before the last update, its T_new) (static)

    @property
    def static(self) -> bool:
        return self.max_length is not None

    def update(self, key: Tensor, value: Tensor, layer: int = 0) -> tuple:
        """Add ``key`` and ``value`` (..., T_new, E) for ``layer``; returns the layer's keys and
        values: all so far (growing) or the (..., max_length, E) buffers (static)."""
        if self.static:
            return self._update_static(key, value, layer)
        past = self.layers.get(layer)
        if past is not None:
            pk, pv = past
            self._check_fits(key, value, pk, pv, layer)
            key, value = cat([pk, key], -2), cat([pv, value], -2)
        self.layers[layer] = (key, value)
        return key, value

    def _check_fits(self, key, value, pk, pv, layer) -> None:
        if pk.shape[:-2] != key.shape[:-2] or pk.shape[-1] != key.shape[-1] or pv.shape[-1] != value.shape[-1]:
            raise ShapeError(
                f"KVCache.update: new keys {key.shape} / values {value.shape} do not fit the cached "
                f"{pk.shape} / {pv.shape} of layer {layer}"
            )

    def _update_static(self, key: Tensor, value: Tensor, layer: int) -> tuple:
        M, T = self.max_length, key.shape[-2]
        entry = self.layers.get(layer)
        if entry is None:
            kb = zeros(*key.shape[:-2], M, key.shape[-1], dtype=key.dtype, device=key.device)
            vb = zeros(*value.shape[:-2], M, value.shape[-1], dtype=value.dtype, device=value.device)
            entry = (kb, vb, tensor(0, dtype=dt.int64, device=key.device))
            self._seen[layer] = 0
        kb, vb, pos = entry
        self._check_fits(key, value, kb, vb, layer)
        seen = self._seen.get(layer)
        if seen is not None and seen + T > M:
            raise ShapeError(f"KVCache.update: {seen} cached + {T} new tokens pass max_length {M} (layer {layer})")
        rel = _slots(M, key.device) - pos  # slot j holds new row j - pos where 0 <= j - pos < T
        write = ((rel >= 0) & (rel < T)).reshape(M, 1)
        if T == 1:
            kb, vb = where(write, key, kb), where(write, value, vb)
        else:
            src = rel.clamp(0, T - 1)
            kb, vb = where(write, key.index_select(-2, src), kb), where(write, value.index_select(-2, src), vb)
        self.layers[layer] = (kb, vb, pos + T)
        self._before[layer] = (pos, T)
        if seen is not None:
            self._seen[layer] = seen + T
        return kb, vb

    def visible(self, layer: int, L: int, causal: bool, device: str = "cpu") -> Tensor | None:
        """(L, S) bool: which keys the queries of the last L of the rows of the last ``update`` of
        ``layer`` may see (True = attend), or None when all of them (growing cache, not causal).
        Causal: a query sees the keys up to its own position; static slots not yet written are
        hidden."""
        if not self.static:
            if not causal:
                return None
            S = self.length(layer)
            return _causal_mask_offset(L, S, device) if S != L else _causal_mask(L, S, device)
        pos, T = self._before[layer]
        end = pos + (T - 1)  # the last slot written; the queries are the last L of the T new rows
        last = end - (L - 1) + _slots(L, device) if causal else end.reshape(1)  # last visible slot per query
        return _slots(self.max_length, device).reshape(1, -1) <= last.reshape(-1, 1)

    def position(self, layer: int = 0):
        """The number of tokens ``layer`` has seen: an int (growing), a 0-d int64 tensor (static)."""
        if not self.static:
            return self.length(layer)
        entry = self.layers.get(layer)
        return entry[2] if entry is not None else tensor(0, dtype=dt.int64)

    def length(self, layer: int = 0) -> int | None:
        """How many tokens ``layer`` has seen (0 before the first update); None for a static cache
        rebuilt by :meth:`from_state`, whose position is known only as a tensor."""
        if self.static:
            return self._seen.get(layer, 0 if layer not in self.layers else None)
        past = self.layers.get(layer)
        return 0 if past is None else past[0].shape[-2]

    def state(self) -> tuple:
        """Static cache: (keys, values, position) of every layer, in layer order, flat."""
        if not self.static:
            raise ValueError("KVCache.state: only a static cache (max_length=...) has a fixed-shape state")
        return tuple(t for layer in sorted(self.layers) for t in self.layers[layer])

    @classmethod
    def from_state(cls, state, max_length: int) -> KVCache:
        """A static cache holding ``state`` (from :meth:`state`); its Python lengths are unknown."""
        if len(state) % 3:
            raise ValueError(
                f"KVCache.from_state: expected (keys, values, position) per layer, got {len(state)} tensors"
            )
        cache = cls(max_length)
        for i in range(0, len(state), 3):
            k, v, p = state[i : i + 3]
            if k.shape[-2] != max_length or v.shape[-2] != max_length or p.ndim != 0:
                raise ShapeError(
                    f"KVCache.from_state: layer {i // 3} has keys {k.shape}, values {v.shape}, position "
                    f"{p.shape}; expected (..., {max_length}, E) buffers and a 0-d position"
                )
            cache.layers[i // 3] = (k, v, p)
        return cache

    def reset(self) -> None:
        """Forget every token (a new sequence)."""
        self.layers.clear()
        self._seen.clear()
        self._before.clear()

    def __repr__(self) -> str:
        size = f", max_length={self.max_length}" if self.static else ""
        return f"KVCache(layers={len(self.layers)}, length={self.length(min(self.layers, default=0))}{size})"


def _slots(n: int, device: str) -> Tensor:
    """arange(n) int64, one realized tensor per size and device (one plan input, not a new trace)."""
    key = ("slots", n, device)
    m = _causal_masks.get(key)
    if m is None:
        m = _causal_masks[key] = arange(n, dtype=dt.int64, device=device)
    return m


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
    query i, at position ``S - L + i``, sees keys ``j <= S - L + i``). With a static cache
    (``KVCache(max_length=M)``) S is M and the slots not yet written are masked too.

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
    if kv_cache is not None:  # causal aligned to the end; a static cache's empty slots hidden
        visible = kv_cache.visible(layer, L, is_causal, scores.device)
    else:
        visible = _causal_mask(L, S, scores.device) if is_causal else None
    if visible is not None:
        scores = where(visible, scores, -math.inf)
    if attn_mask is not None:
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


# Computed in float32 on half tensors and rounded once (PyTorch's opmath).
dt.widen_halves(globals(), ("scaled_dot_product_attention",))
