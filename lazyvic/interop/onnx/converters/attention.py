"""Attention: Attention (grouped-query heads, KV cache, causal, softcap, nonpad_kv_seqlen)
RotaryEmbedding."""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import functional as F
from lazyvic.indexing import cat, stack
from lazyvic.interop.onnx.context import const_tensor, elem_name
from lazyvic.interop.onnx.converters.movement import pad_axes
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor, where


def _attention_check(ctx):
    precision = ctx.attr("softmax_precision")
    if precision is not None and precision not in (1, 11):
        return f"Attention with softmax_precision={elem_name(precision)}"
    return None


def _split_heads(ctx, t: Tensor, heads, what: str) -> Tensor:
    """(B, S, heads * D) -> (B, heads, S, D) for the 3-D layout."""
    if heads is None:
        raise ctx.error(f"3-D {what} needs the q_num_heads and kv_num_heads attributes")
    b, seq, hidden = t.shape
    if hidden % int(heads):
        raise ctx.error(f"{what} hidden size {hidden} is not a multiple of {heads} heads")
    return t.reshape(b, seq, int(heads), hidden // int(heads)).transpose(1, 2)


@register("Attention", since=(23, 24), check=_attention_check)
def attention(ctx, q, k, v, mask=None, past_key=None, past_value=None, nonpad=None):
    """Scaled dot-product attention as the spec draws it: Q and K scaled by sqrt(scale), QK^T,
    softcap, + the bias of attn_mask / is_causal (bottom-right) / nonpad_kv_seqlen, softmax (a fully
    masked row gives zeros), @ V; K/V heads repeated for grouped-query attention."""
    query, key, value = ctx.tensor(q), ctx.tensor(k), ctx.tensor(v)
    three_d = query.ndim == 3
    if three_d:
        query = _split_heads(ctx, query, ctx.attr("q_num_heads"), "Q")
        key = _split_heads(ctx, key, ctx.attr("kv_num_heads"), "K")
        value = _split_heads(ctx, value, ctx.attr("kv_num_heads"), "V")
    past = 0
    if past_key is not None and past_value is not None:
        past = ctx.tensor(past_key).shape[2]
        key = cat([ctx.tensor(past_key), key], 2)
        value = cat([ctx.tensor(past_value), value], 2)
    present_key, present_value = key, value
    b, hq, sq, d = query.shape
    hk, total = key.shape[1], key.shape[2]
    if hq != hk:
        if hq % hk:
            raise ctx.error(f"{hq} query heads are not a multiple of {hk} key/value heads")
        rep = hq // hk
        key = key.unsqueeze(2).expand(b, hk, rep, total, d).reshape(b, hq, total, d)
        value = value.unsqueeze(2).expand(b, hk, rep, total, value.shape[-1]).reshape(b, hq, total, value.shape[-1])
    scale = ctx.attr("scale")
    root = math.sqrt(float(scale) if scale is not None else 1.0 / math.sqrt(d))
    root = float(np.asarray(root, dtype=query.dtype.np))  # the spec's Cast of sqrt(scale) to T
    scores = (query * root) @ (key * root).transpose(-2, -1)  # (B, Hq, Sq, total)
    qk = [scores]
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        scores = (scores * (1.0 / softcap)).tanh() * softcap
    qk.append(scores)
    # Positions a query may not attend: causal (offset by the cached keys) and past nonpad_kv_seqlen.
    valid = None if nonpad is None else ctx.ints(nonpad, "nonpad_kv_seqlen")
    batches = 1 if not valid else len(valid)
    ctx.reserve((batches, 1, sq, total), 9, "the attention mask")  # a bool mask, then float64 at most
    allowed = np.ones((1, 1, sq, total), dtype=bool)
    j = np.arange(total)[None, None, None, :]
    if ctx.attr("is_causal", 0):
        offset = np.array([past] if valid is None else [n - sq for n in valid])[:, None, None, None]
        allowed = allowed & (j <= np.arange(sq)[None, None, :, None] + offset)
    if valid is not None:
        allowed = allowed & (j < np.array(valid)[:, None, None, None])
    if not allowed.all():
        scores = scores + const_tensor(np.where(allowed, 0.0, -np.inf).astype(scores.dtype.np))
    if mask is not None:
        m = ctx.tensor(mask)
        if m.shape[-1] < total:  # a mask may stop at the longest nonpad_kv_seqlen
            fill = m.dtype is dt.bool_
            m = pad_axes(m, [(0, total - m.shape[-1])], fill if fill else 0.0)
        scores = scores + (where(m, 0.0, -math.inf).to(scores.dtype) if m.dtype is dt.bool_ else m)
    qk.append(scores)
    # softmax_precision: the softmax's type (FLOAT or DOUBLE); absent, the scores' own (a half type too).
    precision = {1: dt.float32, 11: dt.float64}.get(ctx.attr("softmax_precision"), scores.dtype)
    work = scores if precision is scores.dtype else scores.to(precision)
    dead = work.amax(-1, keepdim=True) == -math.inf  # every key masked: a zero row, not NaN
    probs = where(dead, 0.0, F.softmax(where(dead, 0.0, work), -1)).to(query.dtype)
    qk.append(probs)
    y = probs @ value
    if three_d:
        y = y.transpose(1, 2).reshape(b, sq, hq * value.shape[-1])
    return y, present_key, present_value, qk[int(ctx.attr("qk_matmul_output_mode", 0))]


@register("RotaryEmbedding", since=(23,))
def rotary_embedding(ctx, a, cos_cache, sin_cache, position_ids=None):
    """RoPE as the spec's reference writes it: rotate the first rotary_embedding_dim features of every
    head by the cached (cos, sin) of the token's position, in halves or interleaved pairs."""
    x = ctx.tensor(a)
    cos, sin = ctx.tensor(cos_cache), ctx.tensor(sin_cache)
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        work = x.transpose(1, 2)
    else:
        heads = ctx.attr("num_heads")
        if not heads:
            raise ctx.error("a 3-D input needs the num_heads attribute")
        work = x.reshape(x.shape[0], x.shape[1], int(heads), x.shape[2] // int(heads))
    b, seq, _, d = work.shape
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or d
    if position_ids is not None:
        ids = ctx.tensor(position_ids).to(dt.int64)
        cos = cos.index_select(0, ids.reshape(-1)).reshape(*ids.shape, cos.shape[-1])
        sin = sin.index_select(0, ids.reshape(-1)).reshape(*ids.shape, sin.shape[-1])
    if cos.shape[-1] != rot // 2 or sin.shape[-1] != rot // 2:
        raise ctx.error(f"cos/sin caches {cos.shape} / {sin.shape} must end in rotary_embedding_dim/2 = {rot // 2}")
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # (B, S, 1, rot/2)
    head = work[:, :, :, :rot]
    if ctx.attr("interleaved", 0):
        x1, x2 = head[:, :, :, 0::2], head[:, :, :, 1::2]
    else:
        x1, x2 = head[:, :, :, : rot // 2], head[:, :, :, rot // 2 :]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if ctx.attr("interleaved", 0):
        rotated = stack([real, imag], -1).reshape(*head.shape)
    else:
        rotated = cat([real, imag], -1)
    out = cat([rotated, work[:, :, :, rot:]], -1) if rot < d else rotated
    return out.transpose(1, 2) if x.ndim == 4 else out.reshape(*x.shape)
