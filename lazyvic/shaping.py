"""Reshaping and rearranging composites: ``squeeze``/``unsqueeze``, ``flatten``/``unflatten``,
``split``/``chunk``/``tensor_split``/``narrow``/``select``/``unbind``, ``movedim``/``swapaxes``,
``flip``, ``roll``, ``diff``,
``repeat``/``tile``/``repeat_interleave``, ``diag``/``diagonal``/``trace``, ``tril``/``triu``
(PyTorch's names, signatures and errors).

All are movement primitives (reshape, permute, expand, slice, pad), sums and gathers at indices
known now, so they fuse and differentiate like any composite; only ``repeat_interleave`` with
repeats held in a pending tensor is a sync point (its output size is data). Written over the
tensors they are handed, so this module sits below :mod:`lazyvic.tensor`, whose methods these
functions are.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.indexing import cat
from lazyvic.shapes import norm_axes, norm_axis, shape_arg
from lazyvic.trace.composite import recipe


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def _dims(dims) -> tuple:
    return (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)


# -------------------------------------------------------------- squeeze & co
def squeeze(x, dim=None):
    """Drop size-1 axes (all of them, or those among ``dim``, an int or a tuple)."""
    if dim is None:
        return x.reshape(*(s for s in x.shape if s != 1))
    axes = norm_axes(dim, x.ndim, "squeeze")
    return x.reshape(*(s for i, s in enumerate(x.shape) if not (i in axes and s == 1)))


def unsqueeze(x, dim: int):
    """A new size-1 axis at ``dim`` (``-1`` appends one)."""
    d = norm_axis(dim, x.ndim + 1, "unsqueeze")
    return x.reshape(*x.shape[:d], 1, *x.shape[d:])


def flatten(x, start_dim: int = 0, end_dim: int = -1):
    """Axes ``start_dim..end_dim`` merged into one (a 0-d input gives shape (1,)).

    Raises:
        ShapeError: ``start_dim`` after ``end_dim``.
    """
    if x.ndim == 0:
        return x.reshape(1)
    s = norm_axis(start_dim, x.ndim, "flatten")
    e = norm_axis(end_dim, x.ndim, "flatten")
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} after end_dim {end_dim}")
    return x.reshape(*x.shape[:s], math.prod(x.shape[s : e + 1]), *x.shape[e + 1 :])


def unflatten(x, dim: int, sizes):
    """Axis ``dim`` split into ``sizes`` (one may be -1)."""
    d = norm_axis(dim, x.ndim, "unflatten")
    return x.reshape(*x.shape[:d], *sizes, *x.shape[d + 1 :])


# ---------------------------------------------------------- pieces of an axis
def narrow(x, dim: int, start: int, length: int):
    """``length`` elements of axis ``dim`` from ``start`` (a negative start counts from the end).

    Raises:
        lazyvic.errors.IndexError: the range leaves the axis.
    """
    d = norm_axis(dim, x.ndim, "narrow")
    start, length = int(start), int(length)
    if start < 0:
        start += x.shape[d]
    if not (0 <= start and 0 <= length and start + length <= x.shape[d]):
        raise LIndexError(f"narrow: range {start}:{start + length} out of bounds for dim {dim} of {x.shape}")
    starts = [0] * x.ndim
    stops = list(x.shape)
    starts[d], stops[d] = start, start + length
    return x._slice(starts, stops, [1] * x.ndim)


def select(x, dim: int, index: int):
    """The slice at ``index`` of axis ``dim``, without that axis (``x[:, index]`` for dim 1).

    Raises:
        lazyvic.errors.IndexError: ``index`` out of range.
    """
    d = norm_axis(dim, x.ndim, "select")
    n = x.shape[d]
    if not -n <= index < n:
        raise LIndexError(f"select: index {index} out of range for dim {dim} of size {n} (shape {x.shape})")
    return x.narrow(d, int(index) % n, 1).reshape(*x.shape[:d], *x.shape[d + 1 :])


def split(x, split_size, dim: int = 0) -> tuple:
    """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of the sizes in a list.

    Raises:
        ShapeError: listed sizes that do not add up to the axis.
    """
    d = norm_axis(dim, x.ndim, "split")
    n = x.shape[d]
    if isinstance(split_size, (int, np.integer)):
        size = int(split_size)
        if size <= 0:
            raise ArgumentError(f"split: split_size must be positive, got {split_size}")
        sizes = [size] * (n // size) + ([n % size] if n % size else [])
        if not sizes:
            sizes = [0]
    else:
        sizes = [int(s) for s in split_size]
    if sum(sizes) != n:
        raise ShapeError(f"split: sizes {sizes} do not add up to {n} along dim {dim} of {x.shape}")
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(d, start, s))
        start += s
    return tuple(out)


def chunk(x, chunks: int, dim: int = 0) -> tuple:
    """``chunks`` pieces along ``dim`` of ``ceil(n / chunks)`` each (fewer when they run out, as
    PyTorch)."""
    if chunks <= 0:
        raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
    n = x.shape[norm_axis(dim, x.ndim, "chunk")]
    return x.split(max(1, -(-n // chunks)), dim)


def tensor_split(x, indices_or_sections, dim: int = 0) -> tuple:
    """Pieces of ``x`` along ``dim`` (``torch.tensor_split``, NumPy's ``array_split``).

    An int ``n`` gives ``n`` pieces: the first ``size % n`` of ``size // n + 1`` elements, the
    rest of ``size // n`` (empty pieces when ``n`` exceeds the size). A list or tuple of indices
    gives the pieces ``x[:i0], x[i0:i1], ..., x[ik:]`` along ``dim``, each index taken as a Python
    slice bound (negative ones count from the end; out-of-range ones clamp). An int64 tensor
    counts as an int (0-d) or a list of indices (1-d); a pending one is computed first (a sync
    point). The pieces are slices of ``x``.

    Raises:
        ShapeError: a 0-d input. ArgumentError: ``n <= 0``. DTypeError: sections or indices that
            are not integers. lazyvic.errors.IndexError: ``dim`` out of range.
    """
    if x.ndim == 0:
        raise ShapeError("tensor_split: expected at least a 1-dimensional tensor, got a 0-d tensor")
    d = norm_axis(dim, x.ndim, "tensor_split")
    n = x.shape[d]
    if _is_tensor(indices_or_sections):
        held = indices_or_sections
        if held.dtype.category != 1 or held.ndim > 1:
            raise DTypeError(
                "tensor_split: a tensor of indices_or_sections must be a 0-d or 1-d integer tensor, "
                f"got {held.dtype.name} of shape {held.shape}"
            )
        indices_or_sections = held.tolist()
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(indices_or_sections, bool):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ArgumentError(f"tensor_split: number of sections must be larger than 0, got {sections}")
        small, extra = divmod(n, sections)
        sizes = [small + 1] * extra + [small] * (sections - extra)
        out, start = [], 0
        for size in sizes:
            out.append(x.narrow(d, start, size))
            start += size
        return tuple(out)
    if not isinstance(indices_or_sections, (list, tuple)) or not all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in indices_or_sections
    ):
        raise DTypeError(
            f"tensor_split: indices_or_sections must be an int or a list/tuple of ints, got {indices_or_sections!r}"
        )

    def bound(i: int) -> int:  # a Python slice bound
        i = int(i)
        return min(max(i + n if i < 0 else i, 0), n)

    edges = [0] + [bound(i) for i in indices_or_sections] + [n]
    return tuple(x.narrow(d, a, max(b - a, 0)) for a, b in zip(edges, edges[1:]))


def unbind(x, dim: int = 0) -> tuple:
    """The slices along ``dim``, each without that axis."""
    d = norm_axis(dim, x.ndim, "unbind")
    return tuple(x.select(d, i) for i in range(x.shape[d]))


def movedim(x, source, destination):
    """Axes ``source`` moved to positions ``destination`` (ints or sequences of one length); the
    other axes keep their order.

    Raises:
        ShapeError: sequences of different lengths, or repeated axes.
    """
    src, dst = _dims(source), _dims(destination)
    if len(src) != len(dst):
        raise ShapeError(f"movedim: source {source} and destination {destination} differ in length")
    src = [norm_axis(s, x.ndim, "movedim") for s in src]
    dst = [norm_axis(s, x.ndim, "movedim") for s in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"movedim: repeated axes in source {source} or destination {destination}")
    rest = iter(i for i in range(x.ndim) if i not in src)
    placed = dict(zip(dst, src))
    return x.permute(*[placed[i] if i in placed else next(rest) for i in range(x.ndim)])


def swapaxes(x, axis0: int, axis1: int):
    return x.transpose(axis0, axis1)


# -------------------------------------------------------------- rearranging
def flip(x, dims):
    """The order of the elements along ``dims`` (an int or a sequence) reversed."""
    out = x
    for d in sorted({norm_axis(d, x.ndim, "flip") for d in _dims(dims)}):
        n = x.shape[d]
        if n > 1:
            out = out.index_select(d, x.new_tensor(np.arange(n - 1, -1, -1), dtype=dt.int64))
    return out if out is not x else x.clone()


def fliplr(x):
    """Flip along axis 1 (a 2-D or larger input)."""
    if x.ndim < 2:
        raise ShapeError(f"fliplr: expected at least 2 dimensions, got shape {x.shape}")
    return x.flip(1)


def flipud(x):
    """Flip along axis 0."""
    if x.ndim < 1:
        raise ShapeError("flipud: expected at least 1 dimension, got a 0-d tensor")
    return x.flip(0)


def roll(x, shifts, dims=None):
    """Elements shifted by ``shifts`` places along ``dims``, wrapping around; without ``dims``,
    the flattened tensor is rolled and the shape restored.

    Raises:
        ShapeError: ``shifts`` and ``dims`` of different lengths.
    """
    if dims is None:
        if not isinstance(shifts, (int, np.integer)) and len(shifts) != 1:
            raise ShapeError(f"roll: without dims, shifts must be one int, got {shifts}")
        shift = int(shifts) if isinstance(shifts, (int, np.integer)) else int(shifts[0])
        return x.reshape(-1).roll(shift, 0).reshape(*x.shape)
    shifts, dims = _dims(shifts), _dims(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll: shifts {shifts} and dims {dims} differ in length")
    out = x
    for shift, dim in zip(shifts, dims):
        d = norm_axis(dim, x.ndim, "roll")
        n = x.shape[d]
        s = int(shift) % n if n else 0
        if s:
            out = cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], d)
    return out if out is not x else x.clone()


def unfold(x, dimension: int, size: int, step: int):
    """``Tensor.unfold``: every slice of ``size`` elements along ``dimension``, ``step`` apart
    (windows, frames). The axis becomes the number of slices, ``(n - size) // step + 1``, and a
    new last axis of length ``size`` holds each slice. A gather (its VJP a scatter-add: windows
    that overlap add their gradients). Raises ShapeError when ``size`` exceeds the axis,
    ArgumentError for a step below 1 or a negative size."""
    d = norm_axis(dimension, x.ndim, "unfold") if x.ndim else 0
    n = x.shape[d] if x.ndim else 1
    if step < 1 or size < 0:
        raise ArgumentError(f"unfold: step must be at least 1 and size non-negative, got step {step}, size {size}")
    if size > n:
        raise ShapeError(f"unfold: size {size} exceeds the size {n} of dimension {dimension} of {x.shape}")
    count = (n - size) // step + 1
    base = x if x.ndim else x.reshape(1)
    idx = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1).astype(np.int64)
    picked = base.index_select(d, type(x)(idx).to(x.device))  # (..., count * size, ...)
    shape = base.shape[:d] + (count, size) + base.shape[d + 1 :]
    out = picked.reshape(*shape).movedim(d + 1, -1)
    return out if x.ndim else out.reshape(size)


def diff(x, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim``: ``out[i] = x[i + 1] - x[i]``, applied ``n``
    times (``torch.diff``); ``prepend`` / ``append`` are concatenated to ``x`` along ``dim`` first
    (dtypes promote as ``cat``). Bool tensors differ by ``!=`` (logical xor). The result keeps
    the dtype and has ``max(size - n, 0)`` elements along ``dim`` (``size`` counting the added
    ones); ``n == 0`` gives a copy.

    Raises:
        ShapeError: a 0-d input, or ``prepend``/``append`` of another number of dimensions or of
            other sizes outside ``dim``. ArgumentError: ``n < 0``. DTypeError: ``prepend`` or
            ``append`` not a tensor.
    """
    if x.ndim == 0:
        raise ShapeError("diff: expects input to be at least one-dimensional, got a 0-d tensor")
    if int(n) < 0:
        raise ArgumentError(f"diff: order must be non-negative, got {n}")
    d = norm_axis(dim, x.ndim, "diff")
    pieces = [x]
    for name, extra in (("prepend", prepend), ("append", append)):
        if extra is None:
            continue
        if not _is_tensor(extra):
            raise DTypeError(f"diff: {name} must be a Tensor, not {type(extra).__name__}")
        if extra.ndim != x.ndim:
            raise ShapeError(
                f"diff: expects {name} to have the same number of dimensions as input, got {extra.shape} and {x.shape}"
            )
        for axis, (a, b) in enumerate(zip(x.shape, extra.shape)):
            if axis != d and a != b:
                raise ShapeError(
                    f"diff: {name} must match the shape of input {x.shape} except along dim {d}, got {extra.shape}"
                )
        pieces.insert(0 if name == "prepend" else len(pieces), extra)
    out = cat(pieces, d) if len(pieces) > 1 else x
    for _ in range(int(n)):
        m = out.shape[d]
        if m == 0:
            break
        later, earlier = out.narrow(d, 1, m - 1), out.narrow(d, 0, m - 1)
        out = (later != earlier) if out.dtype is dt.bool_ else later - earlier
    return out if out is not x else x.clone()


def repeat(x, *sizes):
    """The tensor tiled ``sizes[i]`` times along each axis (``sizes`` may have more entries than
    axes: new leading axes), as PyTorch's ``Tensor.repeat``.

    Raises:
        ShapeError: fewer sizes than axes.
    """
    sizes = shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise ShapeError(f"repeat: {len(sizes)} repeat sizes for a tensor of shape {x.shape} (need >= {x.ndim})")
    out = x.reshape(*((1,) * (len(sizes) - x.ndim) + x.shape))
    for axis, r in enumerate(sizes):
        if r != 1:
            s = out.shape
            tiled = out.reshape(*s[:axis], 1, *s[axis:]).expand(*s[:axis], r, *s[axis:])
            out = tiled.reshape(*s[:axis], r * s[axis], *s[axis + 1 :])
    return out if out is not x else x.clone()


def tile(x, dims):
    """``repeat`` with ``dims`` padded with leading 1s to the number of axes (``torch.tile``)."""
    dims = _dims(dims)
    return x.repeat(*((1,) * (x.ndim - len(dims)) + tuple(dims)))


def repeat_interleave(x, repeats, dim=None, *, output_size=None):
    """Each element repeated ``repeats`` times along ``dim`` (the flattened tensor when None);
    ``repeats`` is an int or one count per element (a list or an int tensor). Counts held in a
    pending tensor are computed first: a sync point (the output size depends on them).

    Raises:
        ShapeError: a count list of the wrong length, or negative counts.
    """
    if dim is None:
        x, d = x.reshape(-1), 0
    else:
        d = norm_axis(dim, x.ndim, "repeat_interleave")
    n = x.shape[d]
    if isinstance(repeats, (int, np.integer)):
        if repeats < 0:
            raise ShapeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        s = x.shape
        out = x.reshape(*s[: d + 1], 1, *s[d + 1 :]).expand(*s[: d + 1], int(repeats), *s[d + 1 :])
        return out.reshape(*s[:d], n * int(repeats), *s[d + 1 :])
    counts = np.asarray(repeats.numpy() if _is_tensor(repeats) else repeats).astype(np.int64).reshape(-1)
    if counts.size == 1:
        counts = np.repeat(counts, n)
    if counts.size != n or (counts < 0).any():
        raise ShapeError(
            f"repeat_interleave: expected {n} non-negative counts for dim {d} of shape {x.shape}, got {counts.tolist()}"
        )
    return x.index_select(d, x.new_tensor(np.repeat(np.arange(n), counts), dtype=dt.int64))


# ------------------------------------------------------------------ diagonals
def diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal of the matrices over axes ``dim1`` and ``dim2`` (``offset`` > 0: above the
    main one), as a last axis; the other axes keep their order.

    Raises:
        ShapeError: ``dim1`` and ``dim2`` are the same axis.
    """
    a, b = norm_axis(dim1, x.ndim, "diagonal"), norm_axis(dim2, x.ndim, "diagonal")
    if a == b:
        raise ShapeError(f"diagonal: dim1 and dim2 are the same axis ({dim1}, {dim2}) of shape {x.shape}")
    y = x.permute(*[i for i in range(x.ndim) if i not in (a, b)], a, b)
    r, c = y.shape[-2:]
    lead = y.shape[:-2]
    if offset >= 0:
        y = y.narrow(-1, min(offset, c), c - min(offset, c))
    else:
        y = y.narrow(-2, min(-offset, r), r - min(-offset, r))
    n = min(y.shape[-2:])
    y = y.narrow(-2, 0, n).narrow(-1, 0, n).reshape(*lead, n * n)
    if n <= 1:
        return y
    return y._slice([0] * len(lead) + [0], list(lead) + [n * n], [1] * len(lead) + [n + 1])


def diag(x, diagonal: int = 0):
    """A 1-D input as the ``diagonal``-th diagonal of a square matrix (zeros elsewhere); a 2-D
    input's ``diagonal``-th diagonal as a 1-D tensor.

    Raises:
        ShapeError: an input that is neither 1-D nor 2-D.
    """
    if x.ndim == 2:
        return x.diagonal(diagonal)
    if x.ndim != 1:
        raise ShapeError(f"diag: expected a 1-D or 2-D input, got shape {x.shape}")
    n, k = x.shape[0], abs(int(diagonal))
    # Row i of an (n, n + 1) zero-padded column holds x[i] at column 0; read row-major as (n, n),
    # x[i] lands at (i, i).
    square = x.reshape(n, 1)._pad(((0, 0), (0, n))).reshape(n * (n + 1)).narrow(0, 0, n * n).reshape(n, n)
    if diagonal >= 0:
        return square._pad(((0, k), (k, 0)))
    return square._pad(((k, 0), (0, k)))


def trace(x):
    """Sum of the main diagonal of a 2-D input.

    Raises:
        ShapeError: an input that is not 2-D.
    """
    if x.ndim != 2:
        raise ShapeError(f"trace: expected a 2-D input, got shape {x.shape}")
    return x.diagonal().sum()


# ---------------------------------------------------------- triangular parts
def _onnx_scalar(b, value) -> str:
    return b.node("Reshape", [b.ints([value]), b.ints([], "scalar_shape")])


def arange_onnx(b, names, at) -> str:
    """ONNX Range for an integer arange whose bounds follow a dynamic axis."""
    out = b.node("Range", [_onnx_scalar(b, at["start"]), _onnx_scalar(b, at["end"]), _onnx_scalar(b, at["step"])])
    return out if at["dtype"] == "int64" else b.node("Cast", [out], to=b.onnx_dtype(at["dtype"]))


def band_mask_onnx(b, names, at) -> str:
    """The ONNX recipe of a band mask: Range, Sub, LessOrEqual (or GreaterOrEqual)."""
    i = b.node("Unsqueeze", [arange_onnx(b, [], dict(start=0, end=at["rows"], step=1, dtype="int64")), b.ints([1])])
    j = b.node("Unsqueeze", [arange_onnx(b, [], dict(start=0, end=at["cols"], step=1, dtype="int64")), b.ints([0])])
    offset = b.node("Sub", [j, i])
    diagonal = b.const(np.asarray(at["diagonal"], dtype=np.int64))
    return b.node("LessOrEqual" if at["lower"] else "GreaterOrEqual", [offset, diagonal])


def with_band_mask_recipe(mask, rows: int, cols: int, diagonal: int, lower: bool):
    """Attach the ONNX recipe of :func:`band_mask_onnx` to a realized (rows, cols) bool mask, so
    exports whose sizes follow a dynamic axis (a causal mask) compute it in the graph."""
    return recipe(mask, band_mask_onnx, rows=rows, cols=cols, diagonal=diagonal, lower=lower)


def _triangle(x, diagonal: int, lower: bool, opname: str):
    if x.ndim < 2:
        raise ShapeError(f"{opname}: expected at least 2 dimensions, got shape {x.shape}")
    r, c = x.shape[-2:]
    make = np.tril if lower else np.triu
    mask = x.new_tensor(make(np.ones((r, c), dtype=bool), diagonal), dtype=dt.bool_)
    mask = with_band_mask_recipe(mask, r, c, diagonal, lower)
    return x.where(mask, False if x.dtype is dt.bool_ else 0 if x.dtype.category == 1 else 0.0)


def tril(x, diagonal: int = 0):
    """The lower triangle (``j - i <= diagonal``) of the last two axes; zeros above."""
    return _triangle(x, diagonal, True, "tril")


def triu(x, diagonal: int = 0):
    """The upper triangle (``j - i >= diagonal``) of the last two axes; zeros below."""
    return _triangle(x, diagonal, False, "triu")
