"""``lazyvic.linalg``: PyTorch's ``torch.linalg`` norms (``vector_norm``, ``matrix_norm``, ``norm``)
and ``Tensor.norm`` / ``torch.norm``, and the cross product (``cross``, and ``Tensor.cross`` /
``torch.cross`` as :func:`tensor_cross`).

Norms are compositions of reductions (``sqrt(sum(x * x))``, ``amax(|x|)`` ...). Matrix functions
that need a decomposition (``svd``, ``inv``, ``det``, the spectral and nuclear norms ...) are not
implemented: they raise :class:`~lazyvic.errors.UnsupportedOpError` naming the function.

Written over the tensors it is handed, so this module sits below :mod:`lazyvic.tensor` (``Tensor.norm``
is :func:`tensor_norm`).
"""

from __future__ import annotations

import math
import warnings

from lazyvic.errors import DTypeError, ShapeError, UnsupportedOpError
from lazyvic.indexing import cat
from lazyvic.shapes import broadcast_shapes, norm_axes, norm_axis


def _floating(opname: str, x, dtype):
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{opname}: expected a floating-point input, got {x.dtype.name}")
    return x


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """``(sum |x|**ord) ** (1 / ord)`` over ``dim`` (None: all elements); ``ord`` inf is the largest
    ``|x|``, -inf the smallest, 0 the number of non-zeros. The gradient of the 2-norm at a zero
    vector is NaN (PyTorch gives 0 there).

    Raises:
        DTypeError: an integer or bool input.
    """
    x = _floating("vector_norm", x, dtype)
    axes = norm_axes(dim, x.ndim, "vector_norm")
    if ord == math.inf:
        return x.abs().amax(axes, keepdim)
    if ord == -math.inf:
        return x.abs().amin(axes, keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(axes, keepdim)
    if ord == 1:
        return x.abs().sum(axes, keepdim)
    if ord == 2:
        return (x * x).sum(axes, keepdim).sqrt()
    p = float(ord)
    return (x.abs() ** p).sum(axes, keepdim) ** (1.0 / p)


def matrix_norm(x, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):  # noqa: A002
    """Norm of the matrices over the two axes ``dim``: ``"fro"`` (Frobenius), 1 / -1 (largest /
    smallest column sum of ``|x|``), inf / -inf (largest / smallest row sum).

    Raises:
        UnsupportedOpError: ``ord`` 2, -2 or ``"nuc"`` (they need singular values).
        ShapeError: ``dim`` is not two distinct axes. DTypeError: an integer input.
    """
    x = _floating("matrix_norm", x, dtype)
    if len(tuple(dim)) != 2:
        raise ShapeError(f"matrix_norm: dim must be two axes, got {dim}")
    r, c = (norm_axis(d, x.ndim, "matrix_norm") for d in dim)
    if r == c:
        raise ShapeError(f"matrix_norm: dim must be two distinct axes, got {dim}")
    if ord == "fro":
        return vector_norm(x, 2, (r, c), keepdim)
    if ord in (2, -2, "nuc"):
        raise UnsupportedOpError(f"matrix_norm: ord={ord!r} needs singular values, which lazyvic does not compute")
    if ord in (1, -1, math.inf, -math.inf):
        inner, outer = (r, c) if ord in (1, -1) else (c, r)  # column sums for 1, row sums for inf
        sums = x.abs().sum(inner, keepdim=True)
        out = sums.amax(outer, keepdim=True) if ord > 0 else sums.amin(outer, keepdim=True)
        return out if keepdim else out.squeeze((r, c))
    raise ValueError(f"matrix_norm: unsupported ord {ord!r} (expected 'fro', 'nuc', 1, -1, 2, -2, inf or -inf)")


def norm(x, ord=None, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    """``torch.linalg.norm``: with ``ord`` None, the 2-norm of the elements over ``dim`` (all when
    None); otherwise a vector norm over one axis (or a 1-D input) and a matrix norm over two
    axes (or a 2-D input).

    Raises:
        ShapeError: ``ord`` given for an input of more than 2 dimensions without ``dim``.
    """
    if dim is not None and not isinstance(dim, int):
        dim = tuple(dim)
    if ord is None:
        if isinstance(dim, tuple) and len(dim) == 2:
            return matrix_norm(x, "fro", dim, keepdim, dtype=dtype)
        return vector_norm(x, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        if x.ndim == 1:
            return vector_norm(x, ord, None, keepdim, dtype=dtype)
        if x.ndim == 2:
            return matrix_norm(x, ord, (0, 1), keepdim, dtype=dtype)
        raise ShapeError(f"linalg.norm: ord={ord!r} needs a 1-D or 2-D input or dim, got shape {x.shape}")
    if isinstance(dim, tuple) and len(dim) == 2:
        return matrix_norm(x, ord, dim, keepdim, dtype=dtype)
    return vector_norm(x, ord, dim, keepdim, dtype=dtype)


def tensor_norm(x, p="fro", dim=None, keepdim: bool = False, dtype=None):
    """``Tensor.norm`` and ``torch.norm``: ``"fro"`` (and 2) is the 2-norm of the elements over
    ``dim`` (all when None), a number ``p`` the vector p-norm, ``"nuc"`` is not supported.

    Raises:
        UnsupportedOpError: ``p="nuc"``.
    """
    if p == "nuc":
        raise UnsupportedOpError("norm: p='nuc' needs singular values, which lazyvic does not compute")
    if dim is not None and not isinstance(dim, int):
        dim = tuple(dim)
    if p == "fro" or p is None:
        p = 2
    return vector_norm(x, p, dim, keepdim, dtype=dtype)


def cross(x, other, *, dim: int = -1):
    """The cross product of 3-vectors along ``dim`` (``torch.linalg.cross``); the other axes
    broadcast. For ``a = x``, ``b = other``: ``(a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0)``.

    Raises:
        ShapeError: operands of different numbers of dimensions, a ``dim`` of length other than
            3, or other axes that do not broadcast. DTypeError: operands of different dtypes.
            lazyvic.errors.IndexError: ``dim`` out of range.
    """
    if x.ndim != other.ndim:
        raise ShapeError(
            f"linalg.cross: inputs must have the same number of dimensions, got {x.shape} and {other.shape}"
        )
    if x.dtype is not other.dtype:
        raise DTypeError(f"linalg.cross: inputs must have one dtype, got {x.dtype.name} and {other.dtype.name}")
    d = norm_axis(dim, x.ndim, "linalg.cross")
    if x.shape[d] != 3 or other.shape[d] != 3:
        raise ShapeError(
            f"linalg.cross: inputs dimension {dim} must have length 3, got {x.shape[d]} and {other.shape[d]} "
            f"(shapes {x.shape} and {other.shape})"
        )
    broadcast_shapes(x.shape, other.shape, "linalg.cross")
    a0, a1, a2 = (x.narrow(d, i, 1) for i in range(3))
    b0, b1, b2 = (other.narrow(d, i, 1) for i in range(3))
    return cat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


def tensor_cross(x, other, dim=None):
    """``torch.cross`` / ``Tensor.cross``: :func:`cross` along ``dim``; without ``dim``, along the
    first axis of ``x`` of length 3, with PyTorch's deprecation warning (a UserWarning; PyTorch
    will change the default to -1, as ``linalg.cross``).

    Raises:
        ShapeError: no axis of length 3 when ``dim`` is None; see :func:`cross`.
    """
    if dim is None:
        dim = next((i for i, s in enumerate(x.shape) if s == 3), None)
        if dim is None:
            raise ShapeError(f"cross: no dimension of size 3 in input of shape {x.shape}")
        warnings.warn(
            "Using torch.cross without specifying the dim arg is deprecated.\n"
            "Please either pass the dim explicitly or simply use torch.linalg.cross.\n"
            "The default value of dim will change to agree with that of linalg.cross in a future release.",
            UserWarning,
            stacklevel=2,
        )
    return cross(x, other, dim=dim)


def _decomposition(name: str):
    def unsupported(*args, **kwargs):
        raise UnsupportedOpError(f"linalg.{name}: lazyvic has no matrix decompositions or solvers")

    unsupported.__name__ = unsupported.__qualname__ = name
    unsupported.__doc__ = f"Not implemented: raises UnsupportedOpError (``torch.linalg.{name}``)."
    return unsupported


inv = _decomposition("inv")
det = _decomposition("det")
slogdet = _decomposition("slogdet")
solve = _decomposition("solve")
cholesky = _decomposition("cholesky")
qr = _decomposition("qr")
svd = _decomposition("svd")
svdvals = _decomposition("svdvals")
eig = _decomposition("eig")
eigh = _decomposition("eigh")
eigvals = _decomposition("eigvals")
eigvalsh = _decomposition("eigvalsh")
pinv = _decomposition("pinv")
lstsq = _decomposition("lstsq")
matrix_rank = _decomposition("matrix_rank")

__all__ = ["vector_norm", "matrix_norm", "norm", "cross", "inv", "det", "slogdet", "solve", "cholesky", "qr", "svd"]
__all__ += ["svdvals", "eig", "eigh", "eigvals", "eigvalsh", "pinv", "lstsq", "matrix_rank"]
