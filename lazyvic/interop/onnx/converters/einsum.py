"""Einsum (ellipsis, diagonals, any number of operands): contracted pairwise, left to right, each
pair as one batched matmul; integers go through float64 (matmul is floating point)."""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor


def _einsum_terms(ctx, ranks) -> tuple:
    """Operand terms and output term with every "..." replaced by digit placeholders (right-aligned,
    so broadcast ellipses line up); implicit output: ellipsis, then letters used once, sorted."""
    equation = ctx.attr("equation", "").replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",") if lhs or len(ranks) != 1 else [""]
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} has {len(terms)} terms for {len(ranks)} inputs")
    width = max((rank - (len(t) - 3) for t, rank in zip(terms, ranks) if "..." in t), default=0)
    if width > 10:
        raise ctx.error("an ellipsis of more than 10 axes is not supported")
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            term = term.replace("...", "".join(str(i) for i in range(width - n, width)))
        if len(term) != rank:
            raise ctx.error(f"term {term!r} of equation {equation!r} does not fit an input of rank {rank}")
        expanded.append(term)
    ellipsis = "".join(str(i) for i in range(width))
    if arrow:
        out = rhs.replace("...", ellipsis)
    else:
        letters = "".join(expanded)
        out = ellipsis + "".join(sorted(c for c in set(letters) if c.isalpha() and letters.count(c) == 1))
    return expanded, out


def _einsum_prepare(t: Tensor, term: str, keep: set) -> tuple:
    """Take the diagonal of repeated letters, then sum the axes no later term needs."""
    while len(set(term)) < len(term):
        c = next(ch for ch in term if term.count(ch) > 1)
        i = term.index(c)
        j = term.index(c, i + 1)
        n = t.shape[i]
        order = [k for k in range(t.ndim) if k not in (i, j)] + [i, j]
        t = t.permute(*order).reshape(*[t.shape[k] for k in order[:-2]], n * n)
        t = t.index_select(t.ndim - 1, const_tensor(np.arange(n, dtype=np.int64) * (n + 1)))
        term = "".join(term[k] for k in order[:-2]) + c
    unused = tuple(k for k, c in enumerate(term) if c not in keep)
    if unused:
        t = t.sum(unused, dtype=t.dtype)
        term = "".join(c for c in term if c in keep)
    return t, term


def _einsum_pair(a: Tensor, ta: str, b: Tensor, tb: str, keep: set) -> tuple:
    """Contract two operands with one batched matmul: (batch, free_a, k) @ (batch, k, free_b)."""
    shared = [c for c in ta if c in tb]
    batch = [c for c in shared if c in keep]
    contract = [c for c in shared if c not in keep]
    free_a, free_b = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    a = a.permute(*[ta.index(c) for c in batch + free_a + contract]) if ta else a
    b = b.permute(*[tb.index(c) for c in batch + contract + free_b]) if tb else b
    nb = len(batch)
    sizes_b = [max(a.shape[i], b.shape[i]) for i in range(nb)]
    a = a.expand(*sizes_b, *a.shape[nb:]) if nb else a
    b = b.expand(*sizes_b, *b.shape[nb:]) if nb else b
    sizes_fa, sizes_fb = a.shape[nb : nb + len(free_a)], b.shape[nb + len(contract) :]
    k = math.prod(a.shape[nb + len(free_a) :])
    out = a.reshape(math.prod(sizes_b), math.prod(sizes_fa), k) @ b.reshape(math.prod(sizes_b), k, math.prod(sizes_fb))
    return out.reshape(*sizes_b, *sizes_fa, *sizes_fb), "".join(batch + free_a + free_b)


@register("Einsum", since=(12, 28))
def einsum(ctx, *values):
    tensors = [ctx.tensor(v) for v in values]
    terms, out = _einsum_terms(ctx, [t.ndim for t in tensors])
    dtype = tensors[0].dtype
    if not dtype.is_floating_point:  # matmul is floating point: integers go through float64
        tensors = [t.to(dt.float64) for t in tensors]
    missing = set(out) - set("".join(terms))
    if missing:
        raise ctx.error(f"output letters {sorted(missing)} appear in no input term")
    later = [set("".join(terms[i + 1 :])) | set(out) for i in range(len(terms))]
    cur, cur_term = _einsum_prepare(tensors[0], terms[0], later[0])
    for i in range(1, len(tensors)):
        nxt, nxt_term = _einsum_prepare(tensors[i], terms[i], later[i] | set(cur_term))
        cur, cur_term = _einsum_pair(cur, cur_term, nxt, nxt_term, later[i])
        cur, cur_term = _einsum_prepare(cur, cur_term, later[i])
    if cur_term:
        cur = cur.permute(*[cur_term.index(c) for c in out])
    return cur.to(dtype)
