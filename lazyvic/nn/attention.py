"""Multi-head attention with PyTorch's parameter names, so its state_dict loads both ways."""

from __future__ import annotations

import math

import numpy as np

from lazyvic import functional as F
from lazyvic.creation import empty, zeros
from lazyvic.errors import ShapeError
from lazyvic.functional.attention import KVCache, _causal_mask  # noqa: F401 (KVCache: lazyvic.nn.KVCache)
from lazyvic.nn import init
from lazyvic.nn.layers import Linear
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor, where


class MultiheadAttention(Module):
    """``nn.MultiheadAttention`` (Vaswani et al. 2017, section 3.2.2) for self- and cross-attention.

    Parameters as PyTorch: ``in_proj_weight`` (3E, E), ``in_proj_bias`` (3E,),
    ``out_proj.weight`` (E, E), ``out_proj.bias`` (E,); Xavier-uniform input
    projection, zero biases. ``kdim``/``vdim`` other than ``embed_dim`` and
    ``add_bias_kv``/``add_zero_attn`` are not supported (ValueError).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)``: inputs are
    (L, N, E) / (S, N, E), or (N, L, E) with ``batch_first=True``. Masks follow
    PyTorch's MultiheadAttention convention, the opposite of
    ``scaled_dot_product_attention``'s: a bool ``attn_mask`` (L, S) or (N*H, L, S)
    and a bool ``key_padding_mask`` (N, S) are True where attention is *not*
    allowed; float masks are added to the scores. ``is_causal=True`` without a mask
    applies the causal mask. Returns ``(output, weights)``; weights are (N, L, S)
    averaged over heads, (N, H, L, S) with ``average_attn_weights=False``, or None
    when ``need_weights=False``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim=None,
        vdim=None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
            raise ValueError(
                "MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim != embed_dim are not supported"
            )
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout, self.batch_first = dropout, batch_first
        self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype, device=device))
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * embed_dim, dtype=dtype, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        kv_cache=None,
        layer: int = 0,
    ):
        """PyTorch's ``MultiheadAttention.forward``; ``kv_cache`` (a lazyvic extension for
        decoding, :class:`lazyvic.nn.KVCache`): the projected keys and values of ``key``/``value``
        (the new tokens) are appended to the cache's ``layer`` and the queries attend to every
        cached token; masks then cover all of them (``is_causal`` is aligned to the end; a static
        cache's slots not yet written are masked)."""
        if query.ndim == 2 and key.ndim == 2 and value.ndim == 2:  # unbatched (L, E), (S, E)
            if key_padding_mask is not None:
                kpm = key_padding_mask
                key_padding_mask = kpm.unsqueeze(0) if isinstance(kpm, Tensor) else np.asarray(kpm)[None]
            axis = 0 if self.batch_first else 1
            self_attention = query is key and key is value
            q = query.unsqueeze(axis)
            k, v = (q, q) if self_attention else (key.unsqueeze(axis), value.unsqueeze(axis))
            out, weights = self.forward(
                q, k, v, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, kv_cache, layer
            )
            return out.squeeze(axis), (weights.squeeze(0) if weights is not None else None)
        if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
            raise ShapeError(
                f"MultiheadAttention: expected 3-D (batched) or 2-D (unbatched) query, key, value; got "
                f"{query.shape}, {key.shape}, {value.shape}"
            )
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        N, L, E = query.shape
        S = key.shape[1]
        if E != self.embed_dim or key.shape != (N, S, E) or value.shape != (N, S, E):
            raise ShapeError(
                f"MultiheadAttention(embed_dim={self.embed_dim}): got query {query.shape}, key "
                f"{key.shape}, value {value.shape} (batch first)"
            )
        H, D = self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if query is key and key is value:  # self-attention: one projection
            q, k, v = F.linear(query, w, b).chunk(3, dim=-1)
        else:
            ws, bs = w.chunk(3, dim=0), (b.chunk(3, dim=0) if b is not None else (None,) * 3)
            q, k, v = (F.linear(x, wi, bi) for x, wi, bi in zip((query, key, value), ws, bs))
        q = q.reshape(N, L, H, D).transpose(1, 2)
        k = k.reshape(N, S, H, D).transpose(1, 2)
        v = v.reshape(N, S, H, D).transpose(1, 2)
        visible = None
        if kv_cache is not None:
            k, v = kv_cache.update(k, v, layer)
            S = k.shape[-2]
            visible = kv_cache.visible(layer, L, is_causal and attn_mask is None, q.device)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        if visible is not None:
            scores = where(visible, scores, -math.inf)
        scores = self._masked(scores, attn_mask, key_padding_mask, is_causal and kv_cache is None, N, L, S)
        attn = F.softmax(scores, -1)
        if self.training and self.dropout > 0:
            attn = F.dropout(attn, self.dropout)
        out = (attn @ v).transpose(1, 2).reshape(N, L, E)
        out = self.out_proj(out)
        if not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        return out, (attn.mean(1) if average_attn_weights else attn)

    def _masked(self, scores, attn_mask, key_padding_mask, is_causal, N, L, S):
        H = self.num_heads
        if attn_mask is None and is_causal:
            scores = where(_causal_mask(L, S, scores.device), scores, -math.inf)
        if attn_mask is not None:
            m = attn_mask if isinstance(attn_mask, Tensor) else Tensor(np.asarray(attn_mask)).to(scores.device)
            if m.shape == (N * H, L, S):
                m = m.reshape(N, H, L, S)
            elif m.shape != (L, S):
                raise ShapeError(
                    f"MultiheadAttention: attn_mask must be ({L}, {S}) or ({N * H}, {L}, {S}), got {m.shape}"
                )
            scores = where(m, -math.inf, scores) if m.dtype.name == "bool" else scores + m.to(scores.dtype)
        if key_padding_mask is not None:
            m = (
                key_padding_mask
                if isinstance(key_padding_mask, Tensor)
                else Tensor(np.asarray(key_padding_mask)).to(scores.device)
            )
            if m.shape != (N, S):
                raise ShapeError(f"MultiheadAttention: key_padding_mask must be ({N}, {S}), got {m.shape}")
            m = m.reshape(N, 1, 1, S)
            scores = where(m, -math.inf, scores) if m.dtype.name == "bool" else scores + m.to(scores.dtype)
        return scores

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"
