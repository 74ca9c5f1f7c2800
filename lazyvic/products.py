"""Matrix and tensor products on the ``matmul`` primitive: ``matmul`` itself, ``mm``, ``bmm``,
``mv``, ``dot``, ``outer``, ``kron``, ``addmm``, ``addmv``, ``baddbmm``, ``einsum`` (PyTorch's names, shape
rules and errors), and ``autocast_operands``, the hook through which ``lazyvic.autocast`` rounds
the operands of matmul and conv2d.

Written over the tensors they are handed (``apply``, ``reshape``, ``permute`` ...), so this
module sits below :mod:`lazyvic.tensor`, whose methods these functions are (``lazyvic.tensor``
re-exports ``matmul`` and ``autocast_operands``).
"""

from __future__ import annotations

import math
import string

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.shapes import broadcast_shapes


def autocast_operands(*tensors) -> tuple:
    """The operands of a matmul or conv2d under ``lazyvic.autocast``: float32 ones rounded to the
    autocast precision (``modes.autocast_precision()``), others as they are."""
    p = modes.autocast_precision()
    if p is None or modes.in_backward():
        # VJP products are not autocast: a backward called inside the context computes what
        # one called outside computes; the gradients are rounded by the rounding ops' own VJPs.
        return tensors
    return tuple(t.apply(p.op, t) if t.dtype is dt.float32 and t._node.op != p.op else t for t in tensors)


def matmul(a, b):
    """Matrix product with PyTorch's rules for 1-D operands and batch broadcasting; dtypes
    promote, and integer products stay integer (wrapping on overflow), as in PyTorch.

    Shapes: (..., M, K) @ (..., K, N) -> (..., M, N).

    Raises:
        ShapeError: an operand of 0 dimensions, K that differs, batch shapes that do not broadcast.
        DTypeError: a bool operand (PyTorch has no bool product either).
    """
    if not hasattr(a, "_node"):
        a = b.new_tensor(a)
    if not hasattr(b, "_node"):
        b = a.new_tensor(b)
    na, nb = a._node, b._node
    if (
        len(na.shape) == 2
        and len(nb.shape) == 2
        and na.dtype is nb.dtype
        and na.dtype.category != 0
        and na.shape[1] == nb.shape[0]
        and modes.autocast_precision() is None
    ):
        return a.apply("matmul", a, b)  # two matrices of one dtype (the common case), no autocast
    shape_a, shape_b = a.shape, b.shape
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dimension, got {a.shape} and {b.shape}")
    if a.dtype is dt.bool_ or b.dtype is dt.bool_:
        raise DTypeError(f"matmul: bool operands are not supported, got {a.dtype.name} and {b.dtype.name}")
    d = dt.promote(a.dtype, b.dtype)
    a, b = (a if a.dtype is d else a.to(d)), (b if b.dtype is d else b.to(d))
    a, b = autocast_operands(a, b)
    squeeze_a = squeeze_b = False
    if a.ndim == 1:
        a, squeeze_a = a.reshape(1, a.shape[0]), True
    if b.ndim == 1:
        b, squeeze_b = b.reshape(b.shape[0], 1), True
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(
            f"matmul: shapes {shape_a} and {shape_b} cannot be multiplied ({a.shape[-1]} != {b.shape[-2]})"
        )
    if b.ndim == 2 and a.ndim > 2:
        # (..., M, K) @ (K, N): one (prod(...) * M, K) @ (K, N) product. One BLAS call
        # instead of one per batch item, and the VJP for b is one product over all rows
        # instead of a batched product followed by a sum over the batch.
        rows = math.prod(a.shape[:-1])  # not -1: a has no elements when K is 0
        out = a.apply("matmul", a.reshape(rows, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
        return out.reshape(*out.shape[:-1]) if squeeze_b else out
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], "matmul")
    except ShapeError:
        raise ShapeError(
            f"matmul: batch dimensions of shapes {shape_a} and {shape_b} cannot be broadcast together"
        ) from None
    a = a._broadcast_to(batch + a.shape[-2:])
    b = b._broadcast_to(batch + b.shape[-2:])
    out = a.apply("matmul", a, b)
    if squeeze_a:
        out = out.reshape(*out.shape[:-2], out.shape[-1])
    if squeeze_b:
        out = out.reshape(*out.shape[:-1])
    return out


def _need(opname: str, x, ndim: int, what: str) -> None:
    if x.ndim != ndim:
        raise ShapeError(f"{opname}: {what} must be {ndim}-D, got shape {x.shape}")


def mm(x, mat2):
    """(n, m) @ (m, p) -> (n, p).

    Raises:
        ShapeError: an operand that is not 2-D, or inner sizes that differ.
    """
    _need("mm", x, 2, "input")
    _need("mm", mat2, 2, "mat2")
    return x.matmul(mat2)


def bmm(x, mat2):
    """(b, n, m) @ (b, m, p) -> (b, n, p), no broadcasting of the batch (as PyTorch).

    Raises:
        ShapeError: an operand that is not 3-D, batch sizes or inner sizes that differ.
    """
    _need("bmm", x, 3, "input")
    _need("bmm", mat2, 3, "mat2")
    if x.shape[0] != mat2.shape[0]:
        raise ShapeError(f"bmm: batch sizes differ: {x.shape} and {mat2.shape}")
    return x.matmul(mat2)


def mv(x, vec):
    """(n, m) @ (m,) -> (n,).

    Raises:
        ShapeError: operands that are not 2-D and 1-D, or sizes that differ.
    """
    _need("mv", x, 2, "input")
    _need("mv", vec, 1, "vec")
    return x.matmul(vec)


def dot(x, other):
    """Inner product of two 1-D tensors of one length (a 0-d tensor).

    Raises:
        ShapeError: operands that are not 1-D, or lengths that differ.
    """
    _need("dot", x, 1, "input")
    _need("dot", other, 1, "other")
    if x.shape != other.shape:
        raise ShapeError(f"dot: lengths differ: {x.shape} and {other.shape}")
    return x.matmul(other)


def outer(x, vec2):
    """Outer product of two 1-D tensors: (n,) x (m,) -> (n, m).

    Raises:
        ShapeError: an operand that is not 1-D.
    """
    _need("outer", x, 1, "input")
    _need("outer", vec2, 1, "vec2")
    return x.reshape(-1, 1) * vec2.reshape(1, -1)


def kron(x, other):
    """The Kronecker product (``torch.kron``): for operands padded with leading size-1 axes to
    one number of dimensions, ``out[i * q + k, ...] = x[i, ...] * other[k, ...]`` along every axis,
    so axis ``j`` of the result has size ``x.shape[j] * other.shape[j]``. Dtypes promote as ``*``.
    """
    nd = max(x.ndim, other.ndim)
    a_shape = (1,) * (nd - x.ndim) + tuple(x.shape)
    b_shape = (1,) * (nd - other.ndim) + tuple(other.shape)
    # (a0, 1, a1, 1, ...) * (1, b0, 1, b1, ...) -> (a0, b0, a1, b1, ...) -> (a0 * b0, a1 * b1, ...)
    a = x.reshape(*[s for p in a_shape for s in (p, 1)])
    b = other.reshape(*[s for p in b_shape for s in (1, p)])
    return (a * b).reshape(*[p * q for p, q in zip(a_shape, b_shape)])


def _scaled_sum(opname: str, input, product, beta, alpha):
    """``beta * input + alpha * product``; with beta 0, input is not read (NaN in it does not
    propagate), as PyTorch documents."""
    out = product if alpha == 1 else product * alpha
    if beta == 0:
        return out
    return out + (input if beta == 1 else input * beta)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``; input broadcasts to (n, p)."""
    return _scaled_sum("addmm", input, mat1.mm(mat2), beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``."""
    return _scaled_sum("addmv", input, mat.mv(vec), beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` for (b, n, m) and (b, m, p) batches."""
    return _scaled_sum("baddbmm", input, batch1.bmm(batch2), beta, alpha)


# ------------------------------------------------------------------ einsum
def _parse_einsum(equation: str, operands) -> tuple:
    """(input subscripts per operand, output subscripts), with ``...`` spelled out as capital
    letters (einsum's subscripts are lower- and upper-case letters; lazyvic reserves ``A``-``Z``
    for ``...`` when the equation has one)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ShapeError(f"einsum: the equation {equation!r} has {len(terms)} operands, got {len(operands)} tensors")
    has_ellipsis = "..." in eq
    spare = [c for c in string.ascii_uppercase if c not in eq] if has_ellipsis else []
    n_ell = 0
    for term, x in zip(terms, operands):
        if "..." in term:
            n_ell = max(n_ell, x.ndim - (len(term) - 3))
    ell = "".join(spare[:n_ell])
    spelled = []
    for term, x in zip(terms, operands):
        if "..." in term:
            k = x.ndim - (len(term) - 3)
            term = term.replace("...", ell[len(ell) - k :] if k else "")
        if len(term) != x.ndim or not all(c.isalpha() for c in term):
            raise ShapeError(f"einsum: subscripts {term!r} do not fit an operand of shape {x.shape} in {equation!r}")
        spelled.append(term)
    if arrow:
        out = rhs.replace("...", ell)
    else:  # implicit output: the letters used once, alphabetically, after the ellipsis
        counts = {}
        for term in spelled:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    if len(set(out)) != len(out) or any(c not in "".join(spelled) for c in out):
        raise ShapeError(f"einsum: output subscripts {out!r} repeat a letter or use one no input has ({equation!r})")
    return spelled, out


def _diagonal_of_repeats(x, term: str) -> tuple:
    """Take the diagonal for a letter repeated within one operand (``"ii->i"``)."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i = term.index(c)
        j = term.index(c, i + 1)
        if x.shape[i] != x.shape[j]:
            raise ShapeError(f"einsum: subscript {c!r} has sizes {x.shape[i]} and {x.shape[j]}")
        x = x.diagonal(0, i, j)  # the diagonal axis goes last
        term = term[:i] + term[i + 1 : j] + term[j + 1 :] + c
    return x, term


def _contract(a, ta: str, b, tb: str, keep: set) -> tuple:
    """Contract two operands over the letters both have and ``keep`` does not: one batched matmul."""
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    size = {}
    for t, x in ((ta, a), (tb, b)):
        for c, n in zip(t, x.shape):
            have = size.get(c)
            if have is None or have == 1:  # a size of 1 broadcasts (0 is a size, not a broadcast)
                size[c] = n
            elif n != have and n != 1:
                raise ShapeError(f"einsum: subscript {c!r} has sizes {have} and {n}")
    a = a.permute(*[ta.index(c) for c in batch + left + summed]).expand(*[size[c] for c in batch + left + summed])
    b = b.permute(*[tb.index(c) for c in batch + summed + right]).expand(*[size[c] for c in batch + summed + right])
    nb = [size[c] for c in batch]
    nl, ns, nr = (math.prod(size[c] for c in group) for group in (left, summed, right))
    prod = a.reshape(*nb, nl, ns).matmul(b.reshape(*nb, ns, nr))
    return prod.reshape(*nb, *[size[c] for c in left + right]), "".join(batch + left + right)


def einsum(equation: str, *operands):
    """Einstein summation (PyTorch's ``torch.einsum``): letters name axes, ``...`` the remaining
    ones; without ``->`` the output holds the letters used once, in alphabetical order.
    Operands may also be passed as one list. Letters of one operand only are summed first,
    a letter repeated in one operand takes its diagonal, and the operands are then contracted
    left to right, each pair as one batched matmul.

    Raises:
        ShapeError: subscripts that do not fit the operands, or sizes that differ for a letter.
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ShapeError("einsum: expected at least one operand")
    terms, out = _parse_einsum(equation, operands)
    xs = []
    for x, term in zip(operands, terms):
        x, term = _diagonal_of_repeats(x, term)
        xs.append((x, term))

    def needed_after(k: int) -> set:
        return set(out).union(*[set(t) for _, t in xs[k + 1 :]])

    # Sum a letter that only its own operand has (and the output does not keep).
    for k, (x, term) in enumerate(xs):
        others = set(out).union(*[set(t) for i, (_, t) in enumerate(xs) if i != k])
        lone = [i for i, c in enumerate(term) if c not in others]
        if lone:
            x = x.sum(tuple(lone))
            term = "".join(c for i, c in enumerate(term) if i not in lone)
        xs[k] = (x, term)
    acc, term = xs[0]
    for k in range(1, len(xs)):
        acc, term = _contract(acc, term, xs[k][0], xs[k][1], needed_after(k))
    if sorted(term) != sorted(out):  # one operand: letters left to sum
        lone = tuple(i for i, c in enumerate(term) if c not in out)
        acc = acc.sum(lone) if lone else acc
        term = "".join(c for c in term if c in out)
    return acc.permute(*[term.index(c) for c in out]) if term != out else acc
