"""PyTorch's module-level functions of the tensor methods: ``lazyvic.exp(x)`` is ``x.exp()``,
``lazyvic.sum(x, 1)`` is ``x.sum(1)``, ``lazyvic.max(x, 1)`` is ``x.max(1)`` ... (``import lazyvic
as torch``), plus the functions PyTorch has only at module level (``allclose``, ``equal``,
``std_mean``, ``broadcast_tensors``, ``meshgrid``, ``cartesian_prod``, ``block_diag``, ``hstack`` ...).

Each twin takes the tensor first (PyTorch's ``input``) and calls the method of that name, so the
method's docstring, shapes, dtypes and errors hold; ``out=`` writes the result into an existing
tensor of its shape (``Tensor.copy_``). Binary arithmetic (``add``, ``mul``, ``pow`` ...) also takes
a Python number first, as PyTorch does.

``torch.trace(x)`` has no twin here: ``lazyvic.trace`` is the subpackage of the lazy graph (use
``x.trace()``).
"""

from __future__ import annotations

import numbers

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.indexing import cat, stack
from lazyvic.pointwise_composites import isin, xlogy  # noqa: F401 (lazyvic.isin, lazyvic.xlogy: a number may come first)
from lazyvic.products import einsum  # noqa: F401 (lazyvic.einsum)
from lazyvic.products_extra import chain_matmul  # noqa: F401 (lazyvic.chain_matmul)
from lazyvic.settings import get_default_dtype
from lazyvic.shapes import broadcast_shapes
from lazyvic.splitting import column_stack, combinations, row_stack  # noqa: F401 (module-level only, as PyTorch)
from lazyvic.tensor import Tensor
from lazyvic.tensor import where as _where

# The reflected operator of a binary method, for a Python number as ``input`` (``torch.sub(2, t)``).
_REFLECTED = {
    "add": "__radd__",
    "sub": "__rsub__",
    "subtract": "__rsub__",
    "mul": "__rmul__",
    "multiply": "__rmul__",
    "div": "__rtruediv__",
    "divide": "__rtruediv__",
    "true_divide": "__rtruediv__",
    "pow": "__rpow__",
    "floor_divide": "__rfloordiv__",
    "remainder": "__rmod__",
}


def _write_out(name: str, out, result):
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): out must be a lazyvic.Tensor, got {type(out).__name__}")
    if out.shape != result.shape:
        raise ShapeError(f"{name}(): out has shape {out.shape}, the result has shape {result.shape}")
    return out.copy_(result)


def _twin(name: str):
    """``lazyvic.<name>(input, *args, out=None, **kwargs)``: ``input.<name>(*args, **kwargs)``."""
    method = getattr(Tensor, name)
    reflected = _REFLECTED.get(name)

    def function(input, *args, out=None, **kwargs):  # noqa: A002 (PyTorch's argument name)
        if not isinstance(input, Tensor):
            if reflected and isinstance(input, numbers.Number) and args and isinstance(args[0], Tensor):
                result = getattr(args[0], reflected)(input)
                return result if out is None else _write_out(name, out, result)
            raise TypeError(f"{name}(): argument 'input' must be a lazyvic.Tensor, not {type(input).__name__}")
        result = getattr(input, name)(*args, **kwargs)
        return result if out is None else _write_out(name, out, result)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``torch.{name}(input, ...)``: ``input.{name}(...)``.\n\n" + (method.__doc__ or "")
    return function


# fmt: off
_TWINS = (
    # elementwise
    "abs", "absolute", "neg", "negative", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
    "reciprocal", "square", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "relu", "sign", "sgn", "floor", "ceil",
    "trunc", "fix", "frac", "round", "clamp", "clip", "clamp_min", "clamp_max", "pow", "add", "sub", "subtract",
    "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder", "fmod", "maximum", "minimum",
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal", "isnan",
    "isinf", "isposinf", "isneginf", "isfinite", "nan_to_num", "isclose", "logical_not", "logical_and",
    "logical_or", "logical_xor", "masked_fill", "lerp", "hypot", "heaviside",
    "atan", "arctan", "asin", "arcsin", "acos", "arccos", "sinh", "cosh", "asinh", "arcsinh", "acosh", "arccosh",
    "atanh", "arctanh", "atan2", "arctan2", "logaddexp", "logaddexp2", "deg2rad", "rad2deg",
    # reductions, scans and order statistics
    "sum", "mean", "var", "std", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "logsumexp", "softmax",
    "log_softmax", "cumsum", "cumprod", "all", "any", "count_nonzero", "norm", "argsort", "sort", "msort", "topk",
    "kthvalue", "median",
    # shapes
    "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "swapaxes", "swapdims", "permute",
    "movedim", "moveaxis", "t", "narrow", "select", "split", "chunk", "unbind", "flip", "fliplr", "flipud", "roll",
    "tile", "repeat_interleave", "diag", "diagonal", "broadcast_to", "diff", "tensor_split",
    # gathers and scatters
    "gather", "scatter", "scatter_add", "index_select", "index_add", "index_copy", "index_fill", "take",
    "take_along_dim", "masked_select", "nonzero", "argwhere", "unique",
    # products
    "mm", "bmm", "mv", "dot", "outer", "ger", "addmm", "addmv", "baddbmm", "kron", "cross",
    # linear algebra (lazyvic/linalg.py)
    "inverse", "det", "logdet", "slogdet", "matrix_power", "cholesky", "cholesky_solve", "cholesky_inverse",
    "pinverse", "svd", "qr",
    # the rest
    "clone", "detach", "numel", "is_floating_point",
    "addcmul", "addcdiv", "nansum", "nanmean", "inner", "vdot", "rot90",
    # statistics, counting, splits, products (lazyvic/statistics.py, counting.py, splitting.py ...)
    "logit", "sinc", "copysign", "signbit", "aminmax", "cov", "corrcoef", "quantile", "nanquantile", "nanmedian",
    "mode", "dist", "renorm", "cummax", "cummin", "logcumsumexp", "bincount", "histc", "histogram",
    "unique_consecutive", "hsplit", "vsplit", "dsplit", "narrow_copy", "addbmm", "addr",
)
# fmt: on

for _name in _TWINS:
    globals()[_name] = _twin(_name)
del _name


def is_tensor(obj) -> bool:
    """True for a lazyvic Tensor (``torch.is_tensor``)."""
    return isinstance(obj, Tensor)


def allclose(input: Tensor, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:  # noqa: A002
    """True when every element is close (``isclose``): a Python bool, so a sync point."""
    return bool(input.isclose(other, rtol, atol, equal_nan).all())


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """True when both have one shape and equal elements (NaN is not equal to NaN): a sync point."""
    if input.shape != other.shape:
        return False
    return bool((input == other).all())


def std_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> tuple:  # noqa: A002
    """(std, mean) over ``dim`` (see ``Tensor.var`` for ``unbiased`` and ``correction``)."""
    return input.std(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


def var_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> tuple:  # noqa: A002
    """(var, mean) over ``dim`` (see ``Tensor.var`` for ``unbiased`` and ``correction``)."""
    return input.var(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


def broadcast_tensors(*tensors: Tensor) -> tuple:
    """The tensors expanded to their common broadcast shape (views, no copies).

    Raises:
        ShapeError: shapes that do not broadcast."""
    shape = ()
    for t in tensors:
        shape = broadcast_shapes(shape, t.shape, "broadcast_tensors")
    return tuple(t.expand(*shape) for t in tensors)


def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple:
    """Coordinate grids of 1-D tensors: with ``"ij"`` grid k varies along axis k; ``"xy"`` swaps
    the first two axes (NumPy's and MATLAB's convention).

    Raises:
        ValueError: another ``indexing``. ShapeError: an input that is not 1-D."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim != 1:
            raise ShapeError(f"meshgrid: expected 1-D tensors, got shape {t.shape}")
    sizes = [t.shape[0] for t in tensors]
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for k, t in enumerate(tensors):
        axis = (1 - k if k < 2 else k) if swap else k
        view = [1] * len(tensors)
        view[axis] = t.shape[0]
        grids.append(t.reshape(*view).expand(*sizes))
    return tuple(grids)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """The Cartesian product of 1-D tensors of one dtype (``torch.cartesian_prod``, Python's
    ``itertools.product``): shape (n0 * n1 * ..., k), row ``i`` one combination, the last tensor
    varying fastest; a single tensor is returned as it is.

    Raises:
        ArgumentError: no tensors. ShapeError: a tensor that is not 1-D. DTypeError: tensors of
            different dtypes (as PyTorch's meshgrid).
    """
    if not tensors:
        raise ArgumentError("cartesian_prod: expected at least one tensor")
    for t in tensors:
        if t.ndim != 1:
            raise ShapeError(f"cartesian_prod: expected 1-D tensors, got shape {t.shape}")
        if t.dtype is not tensors[0].dtype:
            raise DTypeError(f"cartesian_prod: expected tensors of one dtype, got {[t.dtype.name for t in tensors]}")
    if len(tensors) == 1:
        return tensors[0]
    return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)


def block_diag(*tensors: Tensor) -> Tensor:
    """The tensors as the blocks of a block-diagonal matrix, zeros elsewhere
    (``torch.block_diag``): a 0-d tensor is a 1 x 1 block, a 1-D one of n elements a 1 x n block,
    a 2-D one as it is. Shape (sum of rows, sum of columns); dtypes promote as ``cat``. No tensors
    give an empty (1, 0) tensor of the default dtype.

    Raises:
        ShapeError: a tensor of more than 2 dimensions.
    """
    if not tensors:
        return Tensor(np.zeros((1, 0), dtype=get_default_dtype().np))
    blocks = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise ShapeError(
                f"block_diag: input tensors must have 2 or fewer dimensions; input {i} has shape {t.shape}"
            )
        blocks.append(t.reshape(*((1,) * (2 - t.ndim) + tuple(t.shape))))
    d = blocks[0].dtype
    for b in blocks[1:]:
        d = dt.promote(d, b.dtype)
    width = 0  # (a loop: this module's ``sum`` is the tensor function)
    for b in blocks:
        width += b.shape[1]
    rows, left = [], 0
    for b in blocks:
        rows.append(b.to(d)._pad(((0, 0), (left, width - left - b.shape[1]))))
        left += b.shape[1]
    return cat(rows, 0)


def hstack(tensors) -> Tensor:
    """Concatenation along axis 1 (axis 0 for 1-D tensors)."""
    tensors = list(tensors)
    return cat(tensors, 0 if tensors and tensors[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """Concatenation along axis 0, 1-D tensors taken as rows."""
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in tensors], 0)


def dstack(tensors) -> Tensor:
    """Concatenation along axis 2 (``np.dstack``): 1-D (n,) tensors taken as (1, n, 1), 2-D
    (m, n) as (m, n, 1)."""

    def deep(t):
        return t.reshape(1, -1, 1) if t.ndim <= 1 else t.reshape(*t.shape, 1) if t.ndim == 2 else t

    return cat([deep(t) for t in tensors], 2)


def tensordot(a: Tensor, b: Tensor, dims=2) -> Tensor:
    """``torch.tensordot``: the sum of products over ``dims`` axes, the last ``dims`` of ``a``
    with the first ``dims`` of ``b`` (an int), or the axes listed (a pair of lists or ints).
    Shape: a's free axes, then b's. Computed as one matrix product of the permuted, flattened
    operands (its VJP is theirs). Raises ShapeError for axes of other sizes, ArgumentError for
    a negative count or lists of other lengths."""
    if isinstance(dims, (int, np.integer)):
        most = a.ndim if a.ndim < b.ndim else b.ndim  # (this module's min is the tensor function)
        if dims < 0 or dims > most:
            raise ArgumentError(f"tensordot: dims must be in 0..{most}, got {dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, (int, np.integer)) else list(d) for d in dims)
        if len(da) != len(db):
            raise ArgumentError(f"tensordot: both dim lists must have one length, got {da} and {db}")
        da, db = [d % a.ndim if a.ndim else d for d in da], [d % b.ndim if b.ndim else d for d in db]
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(
                f"tensordot: contracted axis {i} of {a.shape} ({a.shape[i]}) and axis {j} of {b.shape} "
                f"({b.shape[j]}) differ"
            )
    free_a = [i for i in range(a.ndim) if i not in da]
    free_b = [j for j in range(b.ndim) if j not in db]
    k = int(np.prod([a.shape[i] for i in da], dtype=np.int64))
    ma = int(np.prod([a.shape[i] for i in free_a], dtype=np.int64))
    nb = int(np.prod([b.shape[j] for j in free_b], dtype=np.int64))
    left = a.permute(*free_a, *da).reshape(ma, k)
    right = b.permute(*db, *free_b).reshape(k, nb)
    return (left @ right).reshape(*[a.shape[i] for i in free_a], *[b.shape[j] for j in free_b])


def _triangle_indices(row: int, col: int, offset: int, dtype, device, lower: bool, name: str) -> Tensor:
    if row < 0 or col < 0:
        raise ArgumentError(f"{name}: row and col must be non-negative, got {row} and {col}")
    rows, cols = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
    d = dt.get_dtype(dtype) if dtype is not None else dt.int64
    t = Tensor(np.stack([rows, cols]).astype(d.np), dtype=d)
    return t.to(device) if device is not None else t


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
    """(2, N) int64: the row and column indices of the lower triangle of a (row, col) matrix
    (``j - i <= offset``), row by row as ``np.tril_indices`` lists them."""
    return _triangle_indices(row, col, offset, dtype, device, True, "tril_indices")


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
    """(2, N) int64: the indices of the upper triangle of a (row, col) matrix (``j - i >= offset``)."""
    return _triangle_indices(row, col, offset, dtype, device, False, "triu_indices")


def searchsorted(sorted_sequence, values, *, out_int32: bool = False, right: bool = False, side=None, sorter=None):
    """``torch.searchsorted``: for each value, the index where it would be inserted to keep the
    last axis of ``sorted_sequence`` sorted: the number of its elements below the value
    (``right`` / ``side="right"``: at most the value). ``sorted_sequence`` 1-D, or with the
    leading axes of ``values``; ``sorter``: indices that sort it. int64 (``out_int32``: int32),
    the shape of ``values``. Computed as a comparison with every element (memory and time of
    ``values.numel() * sorted_sequence.shape[-1]``), on any device, lazily. Raises ShapeError
    for leading axes that differ, ArgumentError for a ``side`` other than left or right."""
    if side is not None:
        if side not in ("left", "right"):
            raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ArgumentError("searchsorted: side='left' and right=True disagree")
        right = side == "right"
    seq = sorted_sequence if isinstance(sorted_sequence, Tensor) else Tensor(sorted_sequence)
    vals = values if isinstance(values, Tensor) else Tensor(np.asarray(values))
    if sorter is not None:
        seq = seq.gather(-1, sorter if isinstance(sorter, Tensor) else Tensor(np.asarray(sorter)))
    if seq.ndim == 1:
        x, s = vals.unsqueeze(-1), seq
    else:
        if seq.shape[:-1] != vals.shape[:-1]:
            raise ShapeError(
                f"searchsorted: sorted_sequence {seq.shape} and values {vals.shape} must share their "
                "leading axes (all but the last)"
            )
        x, s = vals.unsqueeze(-1), seq.unsqueeze(-2)
    below = (s <= x) if right else (s < x)
    out = below.to(dt.int32 if out_int32 else dt.int64).sum(-1)
    return out.to(dt.int32) if out_int32 else out


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False):  # noqa: A002
    """``torch.bucketize``: the bucket of each element of ``input`` among the sorted 1-D
    ``boundaries``: i with ``boundaries[i-1] < x <= boundaries[i]`` (``right``:
    ``boundaries[i-1] <= x < boundaries[i]``); int64 (``out_int32``: int32), ``input``'s shape.
    Raises ShapeError when ``boundaries`` is not 1-D."""
    b = boundaries if isinstance(boundaries, Tensor) else Tensor(np.asarray(boundaries))
    if b.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-D, got shape {b.shape}")
    return searchsorted(b, input, out_int32=out_int32, right=right)


def diagflat(input: Tensor, offset: int = 0) -> Tensor:  # noqa: A002
    """A 2-D tensor with the flattened input on its ``offset`` diagonal (``torch.diagflat``)."""
    return input.reshape(-1).diag(offset)


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """(..., n) -> (..., m, m), m = n + |offset|: the last axis on the ``offset`` diagonal of the
    two new last axes, zeros elsewhere (``torch.diag_embed``; ``dim1``/``dim2`` other than the
    last two raise UnsupportedOpError)."""
    if (dim1, dim2) not in ((-2, -1), (input.ndim - 1, input.ndim)):
        raise UnsupportedOpError(f"diag_embed: dim1={dim1}, dim2={dim2} (only the last two axes)")
    n = input.shape[-1]
    m = n + (offset if offset >= 0 else -offset)  # (this module's abs is the tensor function)
    x = input._pad(((0, 0),) * (input.ndim - 1) + (((offset, 0) if offset >= 0 else (0, -offset)),))
    mask = Tensor(np.eye(m, k=offset, dtype=bool)).to(input.device)
    return x.unsqueeze(-2).expand(*input.shape[:-1], m, m).where(mask, 0)


def _at_least(rank: int, tensors):
    """``tensors`` (one tensor, several, or one list of them) each with at least ``rank`` axes,
    as NumPy's ``atleast_Nd`` adds them; one tensor for one, else a tuple."""
    one = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    items = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    out = []
    for t in items:
        if t.ndim == 0:
            t = t.reshape(*([1] * rank))
        elif t.ndim == 1 and rank >= 2:
            t = t.unsqueeze(0) if rank == 2 else t.reshape(1, -1, 1)
        elif t.ndim == 2 and rank == 3:
            t = t.unsqueeze(-1)
        out.append(t)
    return out[0] if one else tuple(out)


def atleast_1d(*tensors):
    """Each tensor with at least one axis (0-d -> (1,)); one tensor, or a tuple of them."""
    return _at_least(1, tensors)


def atleast_2d(*tensors):
    """Each tensor with at least two axes ((n,) -> (1, n)); one tensor, or a tuple of them."""
    return _at_least(2, tensors)


def atleast_3d(*tensors):
    """Each tensor with at least three axes ((n,) -> (1, n, 1), (m, n) -> (m, n, 1))."""
    return _at_least(3, tensors)


def promote_types(type1, type2):
    """The dtype PyTorch's promotion gives two dtypes (``torch.promote_types``)."""
    return dt.promote(dt.get_dtype(type1), dt.get_dtype(type2))


def result_type(tensor1, tensor2):
    """The dtype an elementwise op of the two operands (tensors or Python numbers) gives
    (``torch.result_type``): tensors promote as ``promote_types``; a number joins a tensor's
    category (an int tensor and a float number: the default float); two numbers give bool,
    int64 or the default float."""
    a, b = (tensor1, tensor2) if isinstance(tensor1, Tensor) or not isinstance(tensor2, Tensor) else (tensor2, tensor1)
    if isinstance(a, Tensor):
        return dt.promote(a.dtype, b.dtype) if isinstance(b, Tensor) else dt.scalar_dtype_for(a.dtype, b)
    if isinstance(a, bool) and isinstance(b, bool):
        return dt.bool_
    if isinstance(a, float) or isinstance(b, float):
        return get_default_dtype()
    return dt.int64


def can_cast(from_, to) -> bool:
    """Whether ``torch.can_cast`` allows the cast: not to a lower category (float -> int,
    int -> bool); within one category any width."""
    return dt.get_dtype(from_).category <= dt.get_dtype(to).category


def is_complex(input) -> bool:  # noqa: A002
    """False: lazyvic has no complex dtypes."""
    return False


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """How tensors print (``torch.set_printoptions``), through NumPy's print options, which
    ``repr`` uses: ``profile`` "default", "short" or "full"; ``sci_mode`` True / False / None
    (automatic)."""
    opts = {}
    if profile == "default":
        opts.update(precision=4, threshold=1000, edgeitems=3, linewidth=80)
    elif profile == "short":
        opts.update(precision=2, threshold=1000, edgeitems=2, linewidth=80)
    elif profile == "full":
        opts.update(precision=4, threshold=np.iinfo(np.int64).max, edgeitems=3, linewidth=80)
    for k, v in dict(precision=precision, threshold=threshold, edgeitems=edgeitems, linewidth=linewidth).items():
        if v is not None:
            opts[k] = v
    if sci_mode is not None:
        opts["suppress"] = not sci_mode
    np.set_printoptions(**opts)


def where(condition, input=None, other=None):  # noqa: A002
    """``torch.where``: ``input`` where ``condition`` is true, else ``other`` (broadcast together);
    with ``condition`` alone, the indices of its true elements, one int64 tensor per axis
    (``condition.nonzero(as_tuple=True)``, a sync point: their number is data)."""
    if input is None and other is None:
        if not isinstance(condition, Tensor):
            condition = Tensor(condition, dtype=dt.bool_)
        return condition.nonzero(as_tuple=True)
    return _where(condition, input, other)


concat = concatenate = cat

__all__ = list(_TWINS) + [
    "is_tensor",
    "allclose",
    "equal",
    "std_mean",
    "var_mean",
    "broadcast_tensors",
    "meshgrid",
    "cartesian_prod",
    "block_diag",
    "hstack",
    "vstack",
    "dstack",
    "diagflat",
    "diag_embed",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "promote_types",
    "result_type",
    "can_cast",
    "is_complex",
    "set_printoptions",
    "tensordot",
    "tril_indices",
    "triu_indices",
    "searchsorted",
    "bucketize",
    "einsum",
    "xlogy",
    "isin",
    "chain_matmul",
    "column_stack",
    "row_stack",
    "combinations",
    "where",
    "concat",
    "concatenate",
]
