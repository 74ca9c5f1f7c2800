"""``lazyvic.linalg``: PyTorch's ``torch.linalg``: norms (``vector_norm``, ``matrix_norm``, ``norm``,
and ``Tensor.norm`` / ``torch.norm``), the cross product (``cross``, and ``Tensor.cross`` /
``torch.cross`` as :func:`tensor_cross`), and the decompositions and solvers: ``inv`` (``inv_ex``),
``det``, ``slogdet``, ``solve``, ``solve_triangular``, ``cholesky`` (``cholesky_ex``), ``eigh``,
``eigvalsh``, ``svd``, ``svdvals``, ``qr``, ``pinv``, ``lstsq``, ``matrix_rank``, ``matrix_power``,
``cond``, and the Tensor methods and ``torch.*`` functions of the same family (``inverse``,
``logdet``, ``pinverse``, ``torch.svd``, ``cholesky_solve`` ...).

Norms are compositions of reductions (``sqrt(sum(x * x))``, ``amax(|x|)`` ...). Decompositions are
the primitives of ``lazyvic/ops/linalg.py`` (LAPACK through NumPy, float32 and float64, each with
its VJP) or compositions of them; a matrix LAPACK cannot factor raises
:class:`~lazyvic.errors.LinAlgError` (also ``lazyvic.linalg.LinAlgError``) at the sync. ``eig``
and ``eigvals`` raise UnsupportedOpError: a general matrix has complex eigenvalues, and lazyvic
has no complex dtype.

Written over the tensors it is handed, so this module sits below :mod:`lazyvic.tensor` (``Tensor.norm``
is :func:`tensor_norm`).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from lazyvic import dtypes
from lazyvic.errors import ArgumentError, DTypeError, LinAlgError, ShapeError, UnsupportedOpError
from lazyvic.indexing import cat
from lazyvic.ops import linalg as linalg_ops
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
        ShapeError: ``dim`` is not two distinct axes. DTypeError: an integer input (and
            float16/bfloat16 for ``ord`` 2, -2 and ``"nuc"``, which take singular values).
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
        rest = [i for i in range(x.ndim) if i not in (r, c)]
        s = svdvals(x.permute(*rest, r, c))  # the largest (2), smallest (-2) or sum ("nuc")
        out = s.amax(-1) if ord == 2 else s.amin(-1) if ord == -2 else s.sum(-1)
        return out.unsqueeze(min(r, c)).unsqueeze(max(r, c)) if keepdim else out
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
    ``dim`` (all when None), a number ``p`` the vector p-norm, ``"nuc"`` the nuclear norm (the sum
    of the singular values) of the matrices over ``dim`` (the last two axes when None)."""
    if p == "nuc":
        return matrix_norm(x, "nuc", (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
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


# ================================================================ decompositions and solvers
# Each is a primitive of lazyvic/ops/linalg.py (LAPACK through NumPy, with its VJP there) or a
# composition of them. A decomposition's primitive packs its factors into one array (an OpDef has
# one output); the functions here slice them out as views.


class SlogdetResult(NamedTuple):
    """``torch.linalg.slogdet``'s result: ``det = sign * exp(logabsdet)``."""

    sign: object
    logabsdet: object


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class SVDResult(NamedTuple):
    """``torch.linalg.svd``'s result: ``A = U diag(S) Vh``."""

    U: object
    S: object
    Vh: object


class SVDLegacyResult(NamedTuple):
    """``torch.svd``'s result: ``A = U diag(S) V^T`` (V, not Vh)."""

    U: object
    S: object
    V: object


class QRResult(NamedTuple):
    Q: object
    R: object


class LstsqResult(NamedTuple):
    solution: object
    residuals: object
    rank: object
    singular_values: object


class InvExResult(NamedTuple):
    inverse: object
    info: object


class CholeskyExResult(NamedTuple):
    L: object
    info: object


def _matrices(opname: str, a, square: bool = False) -> None:
    """A float32/float64 batch of (square) matrices, or ShapeError/DTypeError naming ``opname``."""
    if a.ndim < 2:
        raise ShapeError(f"linalg.{opname}: expected a (..., m, n) input of at least 2 dimensions, got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"linalg.{opname}: expected square matrices (..., n, n), got shape {a.shape}")
    linalg_ops.check_dtype(f"linalg_{opname}", a.dtype)


def inv(A):
    """The inverse of each square matrix of ``A`` (..., n, n), float32 or float64 (LAPACK getrf +
    getri through NumPy). Gradient: ``-A^-T g A^-T``.

    Raises:
        ShapeError: ``A`` is not a batch of square matrices. DTypeError: not float32/float64.
        LinAlgError: at the sync, a singular matrix (names the batch element).
    """
    _matrices("inv", A, square=True)
    return A.apply("linalg_inv", A, check_errors=True)


def inv_ex(A, *, check_errors: bool = False) -> InvExResult:
    """``(inverse, info)``: :func:`inv` that does not raise for a singular matrix (unless
    ``check_errors``): its inverse is NaN (PyTorch leaves LAPACK's partial result) and ``info``
    (int32, (...)) the 1-based column of the first zero pivot of its LU factorization (LAPACK
    getrf's info), 0 for the others.

    Raises:
        ShapeError, DTypeError: as :func:`inv`; LinAlgError: with ``check_errors``, as :func:`inv`.
    """
    _matrices("inv", A, square=True)
    inverse = A.apply("linalg_inv", A, check_errors=bool(check_errors))
    return InvExResult(inverse, A.apply("linalg_info", A, of="inv"))


def det(A):
    """The determinant of each square matrix of ``A`` (..., n, n) -> (...) (an LU factorization).
    Gradient: ``g det(A) A^-T``; at a singular matrix the gradient's sync raises LinAlgError (A^-1
    does not exist; PyTorch goes through an SVD there).

    Raises:
        ShapeError: not square. DTypeError: not float32/float64.
    """
    _matrices("det", A, square=True)
    return A.apply("linalg_det", A)


def slogdet(A) -> SlogdetResult:
    """``(sign, logabsdet)`` of each square matrix: ``det A = sign * exp(logabsdet)``, both (...);
    a singular matrix gives sign 0 and logabsdet -inf. Gradient (of logabsdet): ``g A^-T``.

    Raises:
        ShapeError: not square. DTypeError: not float32/float64.
    """
    _matrices("slogdet", A, square=True)
    packed = A.apply("linalg_slogdet", A)
    return SlogdetResult(packed.select(-1, 0), packed.select(-1, 1))


def logdet(A):
    """``log det A`` (``torch.logdet``): NaN where the determinant is negative, -inf where it is 0.

    Raises:
        ShapeError: not square. DTypeError: not float32/float64.
    """
    sign, logabs = slogdet(A)
    return logabs.where(sign >= 0, math.nan)


def _batched(opname: str, a, b):
    """``a`` (..., n, n) and ``b`` (..., n, k) expanded to their broadcast batch axes."""
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], f"linalg.{opname}")
    return a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])


def solve(A, B, *, left: bool = True):
    """X with ``A X = B`` (``left=False``: ``X A = B``) for square ``A`` (..., n, n) and ``B``
    (..., n, k), batch axes broadcast; ``B`` of shape (n,) or ``A.shape[:-1]`` is one vector per
    matrix (PyTorch's rule), and so is X. LAPACK gesv (LU with partial pivoting). Gradients:
    ``gB = A^-T g``, ``gA = -gB X^T``.

    Raises:
        ShapeError: ``A`` not square, rows of ``B`` other than n, batch axes that do not
            broadcast. DTypeError: not float32/float64, or two dtypes.
        LinAlgError: at the sync, a singular ``A``.
    """
    _matrices("solve", A, square=True)
    if not left:
        if B.ndim < 2:
            raise ShapeError(f"linalg.solve: left=False needs a (..., k, n) B, got shape {B.shape}")
        return solve(A.mT, B.mT).mT
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    b = B.unsqueeze(-1) if vector else B
    if b.ndim < 2 or b.shape[-2] != A.shape[-1]:
        raise ShapeError(
            f"linalg.solve: A of shape {A.shape} and B of shape {B.shape} do not fit "
            f"(expected B of shape (..., {A.shape[-1]}, k) or (..., {A.shape[-1]}))"
        )
    a, b = _batched("solve", A, b)
    x = a.apply("linalg_solve", a, b)
    return x.squeeze(-1) if vector else x


def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False):
    """X with ``A X = B`` (``left=False``: ``X A = B``) reading only the upper (``upper``) or lower
    triangle of ``A`` (..., n, n), and taking its diagonal as ones with ``unitriangular``; ``B``
    (..., n, k), batch axes broadcast. Solved by :func:`solve` on the triangle (an LU of a
    triangular matrix), so its gradient is the triangle's.

    Raises:
        ShapeError, DTypeError, LinAlgError: as :func:`solve`.
    """
    _matrices("solve_triangular", A, square=True)
    if B.ndim < 2:
        raise ShapeError(f"linalg.solve_triangular: expected B of shape (..., n, k), got shape {B.shape}")
    if unitriangular:
        tri = (A.triu(1) if upper else A.tril(-1)) + A.new_tensor(np.eye(A.shape[-1]))
    else:
        tri = A.triu() if upper else A.tril()
    return solve(tri, B, left=left)


def cholesky(A, *, upper: bool = False):
    """The Cholesky factor of each symmetric positive-definite matrix of ``A`` (..., n, n): lower
    L with ``A = L L^T`` (``upper``: ``U = L^T``, ``A = U^T U``); LAPACK potrf reads the lower
    triangle. Gradient: Murray 2016 (see lazyvic/ops/linalg.py), symmetric.

    Raises:
        ShapeError: not square. DTypeError: not float32/float64.
        LinAlgError: at the sync, a matrix that is not positive definite.
    """
    _matrices("cholesky", A, square=True)
    low = A.apply("linalg_cholesky", A, check_errors=True)
    return low.mT if upper else low


def cholesky_ex(A, *, upper: bool = False, check_errors: bool = False) -> CholeskyExResult:
    """``(L, info)``: :func:`cholesky` that does not raise (unless ``check_errors``) for a matrix that
    is not positive definite: its L is NaN (PyTorch leaves LAPACK's partial result) and ``info``
    (int32, (...)) the order of its first leading minor that is not positive definite (LAPACK
    potrf's info), 0 for the others.

    Raises:
        ShapeError, DTypeError: as :func:`cholesky`; LinAlgError: with ``check_errors``.
    """
    _matrices("cholesky", A, square=True)
    low = A.apply("linalg_cholesky", A, check_errors=bool(check_errors))
    return CholeskyExResult(low.mT if upper else low, A.apply("linalg_info", A, of="cholesky"))


def cholesky_solve(B, L, upper: bool = False):
    """X with ``A X = B`` for ``A = L L^T`` given its Cholesky factor ``L`` (``upper``: ``A = U^T U``)
    (``torch.cholesky_solve(B, L)``): two triangular solves; batch axes broadcast.

    Raises:
        ShapeError, DTypeError, LinAlgError: as :func:`solve_triangular`.
    """
    low = L.mT if upper else L
    return solve_triangular(low.mT, solve_triangular(low, B, upper=False), upper=True)


def cholesky_inverse(L, upper: bool = False):
    """``A^-1`` for ``A = L L^T`` given ``L`` (``upper``: ``A = U^T U``) (``torch.cholesky_inverse``)."""
    _matrices("cholesky_inverse", L, square=True)
    return cholesky_solve(L.new_tensor(np.eye(L.shape[-1])).expand(*L.shape), L, upper)


def eigh(A, UPLO: str = "L") -> EighResult:  # noqa: N803 (PyTorch's name)
    """Eigenvalues (..., n), ascending, and orthonormal eigenvectors (..., n, n), as columns, of
    each symmetric matrix of ``A``, read from its lower (``UPLO="L"``) or upper triangle (LAPACK
    syevd through NumPy). Each eigenvector's sign is LAPACK's choice. Gradient: Giles 2008
    (lazyvic/ops/linalg.py), not defined where eigenvalues coincide and eigenvectors are used.

    Raises:
        ShapeError: not square. DTypeError: not float32/float64. ValueError: another UPLO.
        LinAlgError: at the sync, no convergence.
    """
    _matrices("eigh", A, square=True)
    if UPLO not in ("L", "U"):
        raise ArgumentError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    n = A.shape[-1]
    packed = A.apply("linalg_eigh", A, uplo=UPLO)
    return EighResult(packed.select(-1, n), packed.narrow(-1, 0, n))


def eigvalsh(A, UPLO: str = "L"):  # noqa: N803
    """The eigenvalues (..., n), ascending, of each symmetric matrix of ``A`` (see :func:`eigh`);
    their gradient is ``V diag(g) V^T``, defined also where eigenvalues coincide."""
    return eigh(A, UPLO).eigenvalues


def svd(A, full_matrices: bool = True, *, driver=None) -> SVDResult:
    """``A = U diag(S) Vh`` for ``A`` (..., m, n), k = min(m, n): S (..., k) descending; U (..., m, k)
    and Vh (..., k, n), or (m, m) and (n, n) with ``full_matrices`` (PyTorch's default). LAPACK
    gesdd through NumPy; the signs of singular vectors are LAPACK's choice. Gradient: PyTorch's
    ``svd_backward`` (Townsend 2016), from the first k columns of U and V alone, not defined where
    singular values coincide (or are 0 when m != n) and the vectors are used. ``driver`` is
    accepted for PyTorch's signature (its CUDA drivers).

    Raises:
        ShapeError: fewer than 2 dimensions. DTypeError: not float32/float64.
        LinAlgError: at the sync, no convergence.
    """
    _matrices("svd", A)
    m, n = A.shape[-2:]
    k = min(m, n)
    packed = A.apply("linalg_svd", A, full_matrices=bool(full_matrices), compute_uv=True)
    ku, kv = (m, n) if full_matrices else (k, k)
    u = packed.narrow(-2, 0, m).narrow(-1, 0, ku)
    s = packed.select(-2, m).narrow(-1, 0, k)
    v = packed.narrow(-2, m + 1, n).narrow(-1, 0, kv)
    return SVDResult(u, s, v.mT)


def svdvals(A, *, driver=None):
    """The singular values (..., k), descending, of ``A`` (..., m, n) (LAPACK gesdd without vectors).
    Gradient: ``U diag(g) V^T``, from an SVD recorded by the backward; defined everywhere the
    singular vectors are."""
    _matrices("svdvals", A)
    return A.apply("linalg_svd", A, full_matrices=False, compute_uv=False)


def qr(A, mode: str = "reduced") -> QRResult:
    """``A = Q R`` for ``A`` (..., m, n), k = min(m, n): ``mode="reduced"``: Q (..., m, k) with
    orthonormal columns, R (..., k, n) upper triangular; ``"complete"``: Q (..., m, m), R (..., m, n);
    ``"r"``: R alone and an empty Q, as PyTorch. LAPACK geqrf + orgqr through NumPy (R's diagonal
    may be negative). Gradient: PyTorch's ``linalg_qr_backward``.

    Raises:
        ShapeError: fewer than 2 dimensions. DTypeError: not float32/float64.
        ValueError: another mode. UnsupportedOpError: at backward, ``mode="complete"`` with m > n.
    """
    _matrices("qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    m, n = A.shape[-2:]
    packed = A.apply("linalg_qr", A, mode="complete" if mode == "complete" else "reduced")
    r = packed.narrow(-2, m, n).mT
    if mode == "r":
        return QRResult(A.new_zeros(0), r)
    return QRResult(packed.narrow(-2, 0, m), r)


def _rtol(opname: str, a, atol, rtol, rcond=None):
    """PyTorch's default tolerances: ``rtol = eps * max(m, n)`` unless ``atol`` > 0 is given alone."""
    if rcond is not None:
        if rtol is not None:
            raise ArgumentError(f"linalg.{opname}: give rtol or rcond, not both")
        rtol = rcond
    if rtol is None:
        positive_atol = atol is not None and (not isinstance(atol, (int, float)) or atol > 0)
        rtol = 0.0 if positive_atol else float(np.finfo(a.dtype.np).eps) * max(a.shape[-2:])
    return 0.0 if atol is None else atol, rtol


def _kept(s, atol, rtol):
    """Which of the non-negative values ``s`` (..., k) exceed ``max(atol, rtol * max(s))``."""
    tol = s.amax(-1, keepdim=True).detach() * rtol
    tol = tol.maximum(atol) if not isinstance(atol, (int, float)) else tol.clamp_min(float(atol))
    return s > tol


def _reciprocal_kept(s, kept):
    """1 / s where kept, else 0, with no NaN in the gradient (1 / 0 is never computed)."""
    return (1.0 / s.where(kept, 1.0)).where(kept, 0.0)


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False, rcond=None):
    """The Moore-Penrose pseudo-inverse (..., n, m) of ``A`` (..., m, n): ``V diag(1/S) U^T`` over
    the singular values above ``max(atol, rtol * S_max)`` (PyTorch's defaults: ``rtol = eps *
    max(m, n)`` when neither is given, 0 when only ``atol`` is; ``rcond`` is rtol's old name);
    ``hermitian``: from :func:`eigh` of a symmetric ``A``, over ``|w|``. Its gradient goes through
    the SVD's (or eigh's); at a rank-deficient matrix it follows the kept values alone.

    Raises:
        ShapeError: fewer than 2 dimensions (``hermitian``: not square). DTypeError: not
            float32/float64. LinAlgError: at the sync, no convergence.
    """
    _matrices("pinv", A, square=hermitian)
    atol, rtol = _rtol("pinv", A, atol, rtol, rcond)
    if hermitian:
        w, v = eigh(A)
        kept = _kept(w.abs(), atol, rtol)
        return (v * _reciprocal_kept(w, kept).unsqueeze(-2)) @ v.mT
    u, s, vh = svd(A, full_matrices=False)
    kept = _kept(s, atol, rtol)
    return (vh.mT * _reciprocal_kept(s, kept).unsqueeze(-2)) @ u.mT


def matrix_rank(A, *, atol=None, rtol=None, hermitian: bool = False, tol=None):
    """The number (int64, (...)) of singular values of ``A`` (..., m, n) above ``max(atol, rtol *
    S_max)`` (defaults as :func:`pinv`; ``tol``, the old form, is ``atol`` with ``rtol = 0``);
    ``hermitian``: of ``|eigenvalues|`` of a symmetric ``A``.

    Raises:
        ShapeError, DTypeError: as :func:`svdvals` (:func:`eigvalsh` when ``hermitian``).
    """
    _matrices("matrix_rank", A, square=hermitian)
    if tol is not None:
        atol, rtol = tol, 0.0
    atol, rtol = _rtol("matrix_rank", A, atol, rtol)
    s = eigvalsh(A).abs() if hermitian else svdvals(A)
    return _kept(s, atol, rtol).sum(-1).to(dtypes.int64)


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A, B, rcond=None, *, driver=None) -> LstsqResult:
    """The least-squares solution X of ``A X = B`` for ``A`` (..., m, n) and ``B`` (..., m, k) (or
    (..., m): one vector), batch axes broadcast, with PyTorch's CPU results: ``solution``
    (..., n, k); ``residuals`` ``||A X - B||^2`` per column (..., k) for m > n and every matrix of
    full rank, with drivers other than ``"gelsy"`` (PyTorch's default; else empty); ``rank``
    (int64, (...); empty for ``"gels"``); ``singular_values`` (..., min(m, n)) for ``"gelsd"`` and
    ``"gelss"`` (else empty). Computed as ``pinv(A, rtol=rcond) @ B`` (rcond: eps * max(m, n) by
    default), one SVD whatever the driver: the minimum-norm solution, as gelsd's (gelsy's may
    differ for a rank-deficient A); its gradient goes through the SVD.

    Raises:
        ShapeError: ``A`` below 2 dimensions, rows of ``B`` other than m, batch axes that do not
            broadcast. DTypeError: not float32/float64, or two dtypes. ValueError: another driver.
    """
    _matrices("lstsq", A)
    driver = "gelsy" if driver is None else driver
    if driver not in _LSTSQ_DRIVERS:
        raise ArgumentError(f"linalg.lstsq: driver must be one of {_LSTSQ_DRIVERS}, got {driver!r}")
    if A.dtype is not B.dtype:
        raise DTypeError(f"linalg.lstsq: expected one dtype, got {A.dtype.name} and {B.dtype.name}")
    m, n = A.shape[-2:]
    vector = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    if b.ndim < 2 or b.shape[-2] != m:
        raise ShapeError(
            f"linalg.lstsq: A of shape {A.shape} and B of shape {B.shape} do not fit (B's rows must be {m})"
        )
    a, b = _batched("lstsq", A, b)
    x = pinv(a, rtol=rcond if rcond is not None and rcond >= 0 else None) @ b
    empty = A.new_zeros(0)
    rank = matrix_rank(a, rtol=rcond if rcond is not None and rcond >= 0 else None) if driver != "gels" else None
    residuals = empty
    if driver != "gelsy" and m > n:  # (a vector B's residuals keep their axis of 1, as PyTorch's)
        full = bool((matrix_rank(a) == n).all()) if rank is None else bool((rank == n).all())  # a sync, as PyTorch's
        if full:
            residuals = ((a @ x - b) ** 2).sum(-2)
    singular = svdvals(a) if driver in ("gelsd", "gelss") else empty
    if rank is None:
        rank = empty.to(dtypes.int64)
    return LstsqResult(x.squeeze(-1) if vector else x, residuals, rank, singular)


def matrix_power(A, n: int):
    """``A`` (..., k, k) to the integer power ``n``: products by repeated squaring; n = 0 the
    identity, n < 0 the power of :func:`inv`.

    Raises:
        ShapeError: not square. DTypeError: a negative power of a non-float input.
        LinAlgError: at the sync, n < 0 and a singular matrix.
    """
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"linalg.matrix_power: expected square matrices (..., n, n), got shape {A.shape}")
    n = int(n)
    if n == 0:
        return A.new_tensor(np.eye(A.shape[-1])).expand(*A.shape)
    base = inv(A) if n < 0 else A
    n = -n if n < 0 else n  # (functions.py's abs is the tensor function)
    result = None
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


def cond(A, p=None):
    """The condition number of each matrix of ``A`` in the norm ``p``: None or 2, ``S_max / S_min``;
    -2, ``S_min / S_max``; otherwise ``norm(A, p) * norm(inv(A), p)`` (square A).

    Raises:
        ShapeError, DTypeError: as :func:`svdvals` / :func:`inv`.
    """
    if p is None or p in (2, -2):
        s = svdvals(A)
        big, small = s.narrow(-1, 0, 1).squeeze(-1), s.narrow(-1, s.shape[-1] - 1, 1).squeeze(-1)
        return small / big if p == -2 else big / small
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def eig(A):
    """Not implemented: the eigenvalues of a general matrix are complex, and lazyvic has no complex
    dtype. Use :func:`eigh` for a symmetric matrix.

    Raises:
        UnsupportedOpError: always.
    """
    raise UnsupportedOpError(
        "linalg.eig: lazyvic has no complex dtype for the eigen-decomposition of a general matrix; "
        "use linalg.eigh for symmetric matrices"
    )


def eigvals(A):
    """Not implemented (see :func:`eig`).

    Raises:
        UnsupportedOpError: always.
    """
    raise UnsupportedOpError(
        "linalg.eigvals: lazyvic has no complex dtype for the eigenvalues of a general matrix; "
        "use linalg.eigvalsh for symmetric matrices"
    )


# ------------------------------------------------ the Tensor methods and torch.* functions
def tensor_pinverse(x, rcond: float = 1e-15):
    """``Tensor.pinverse`` / ``torch.pinverse``: :func:`pinv` with ``rtol=rcond``."""
    return pinv(x, rtol=rcond)


def tensor_slogdet(x):
    """``Tensor.slogdet`` / ``torch.slogdet``: ``(sign, logabsdet)`` (see :func:`slogdet`)."""
    return slogdet(x)


def tensor_cholesky(x, upper: bool = False):
    """``Tensor.cholesky`` / ``torch.cholesky`` (deprecated in PyTorch): :func:`cholesky`."""
    return cholesky(x, upper=upper)


def tensor_svd(x, some: bool = True, compute_uv: bool = True) -> SVDLegacyResult:
    """``torch.svd`` / ``Tensor.svd``: ``(U, S, V)`` with ``A = U diag(S) V^T`` (V, not Vh); reduced
    unless ``some=False``; with ``compute_uv=False``, U and V are zeros of shapes (..., m, m) and
    (..., n, n), as PyTorch's."""
    if not compute_uv:
        m, n = x.shape[-2:]
        return SVDLegacyResult(x.new_zeros(*x.shape[:-2], m, m), svdvals(x), x.new_zeros(*x.shape[:-2], n, n))
    u, s, vh = svd(x, full_matrices=not some)
    return SVDLegacyResult(u, s, vh.mT)


def tensor_qr(x, some: bool = True) -> QRResult:
    """``torch.qr`` / ``Tensor.qr``: :func:`qr`, reduced unless ``some=False``."""
    return qr(x, "reduced" if some else "complete")


def tensor_cholesky_solve(x, L, upper: bool = False):  # noqa: N803
    """``Tensor.cholesky_solve(L)``: :func:`cholesky_solve` of ``x`` (the right-hand side)."""
    return cholesky_solve(x, L, upper)


__all__ = ["vector_norm", "matrix_norm", "norm", "cross", "inv", "det", "slogdet", "solve", "cholesky", "qr", "svd"]
__all__ += ["svdvals", "eig", "eigh", "eigvals", "eigvalsh", "pinv", "lstsq", "matrix_rank", "LinAlgError"]
__all__ += ["solve_triangular", "matrix_power", "cond", "inv_ex", "cholesky_ex"]
