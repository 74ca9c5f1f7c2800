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
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.indexing import cat, stack
from lazyvic.products import einsum  # noqa: F401 (lazyvic.einsum)
from lazyvic.settings import get_default_dtype
from lazyvic.shapes import broadcast_shapes
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
    # the rest
    "clone", "detach", "numel", "is_floating_point",
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
    "einsum",
    "where",
    "concat",
    "concatenate",
]
