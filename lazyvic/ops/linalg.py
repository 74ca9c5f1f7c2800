"""Linear-algebra primitives: LAPACK through NumPy (``np.linalg``) on batches of matrices.

    linalg_inv(A; check_errors)
                          (..., n, n) -> (..., n, n)          A^-1 (unchecked: NaN where singular)
    linalg_det(A)         (..., n, n) -> (...)                det A
    linalg_slogdet(A)     (..., n, n) -> (..., 2)             [sign, log |det A|]
    linalg_solve(A, B)    (..., n, n), (..., n, k) -> (..., n, k)   X with A X = B (equal batch axes)
    linalg_cholesky(A; check_errors)
                          (..., n, n) -> (..., n, n)          lower L with A = L L^T (unchecked:
                                                              NaN where not positive definite)
    linalg_info(A; of)    (..., n, n) -> (...) int32          LAPACK's info of getrf (``of="inv"``)
                                                              or potrf (``"cholesky"``): 0 = success
    linalg_eigh(A; uplo)  (..., n, n) -> (..., n, n + 1)      [V | w]: A = V diag(w) V^T, w ascending
    linalg_svd(A; full_matrices, compute_uv)
                          (..., m, n) -> (..., m + 1 + n, W)  rows [U; S; V] (A = U diag(S) V^T), or
                                                              (..., k) the singular values alone
    linalg_qr(A; mode)    (..., m, n) -> (..., m + n, kq)     rows [Q; R^T]: A = Q R

An OpDef has one output, so a decomposition packs its factors into one array; the front end
(``lazyvic/linalg.py``) slices them out (free views), and the VJP of a slice pads zeros, so each
VJP here receives one packed cotangent that it splits the same way. k = min(m, n); for SVD
W = k (reduced) or max(m, n) (``full_matrices``: U is (m, m), V is (n, n), each padded with zero
columns to W); for QR kq = k (``mode="reduced"``) or m (``"complete"``).

float32 and float64 only (float32 runs float32 LAPACK, as NumPy and PyTorch do); half types and
integers raise DTypeError when recorded, as PyTorch's CPU kernels have none. A matrix LAPACK
cannot factor (a singular matrix for inv and solve, one that is not positive definite for
cholesky, no convergence) raises :class:`~lazyvic.errors.LinAlgError` at the sync, naming the op,
the shape and the batch element, in the interpreter and in compiled plans alike: both run these
references (LAPACK through NumPy is the implementation, a library step of CPU plans, not a
fallback; CUDA plans run it on host copies, a reported fallback), on one BLAS thread so that
every tier computes the same bits.

Each VJP is written with lazy tensor ops and cites its source; none is defined for eigenvalues
or singular values that coincide (the formulas divide by their differences), as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError, LinAlgError, ShapeError, UnsupportedOpError
from lazyvic.ops.blas import one_thread
from lazyvic.ops.opdef import OpDef, onnx_node, register

LINALG_KIND = "linalg"


# ------------------------------------------------------------------------ shape and dtype rules
def public_name(op: str) -> str:
    """``linalg_inv`` -> ``linalg.inv``: the name users call, in error messages."""
    return op.replace("_", ".", 1)


def check_dtype(op: str, dtype) -> None:
    """float32 and float64 only (LAPACK has neither half types nor integers).

    Raises:
        DTypeError: any other dtype, naming the op.
    """
    if dtype.category != 2:
        raise DTypeError(f"{public_name(op)}: expected a float32 or float64 input, got {dtype.name}")
    if dtype.is_half:
        raise DTypeError(
            f"{public_name(op)}: {dtype.name} is not supported (LAPACK has no half-precision routines, "
            f"as in PyTorch); cast the input to float32"
        )


def _matrices(op: str, shape: tuple, square: bool) -> None:
    if len(shape) < 2:
        raise ShapeError(f"{public_name(op)}: expected a (..., m, n) input of at least 2 dimensions, got shape {shape}")
    if square and shape[-1] != shape[-2]:
        raise ShapeError(f"{public_name(op)}: expected square matrices (..., n, n), got shape {shape}")


def _square_infer(op: str, out_shape):
    def infer(shapes, dtypes, at):
        _matrices(op, shapes[0], True)
        check_dtype(op, dtypes[0])
        return out_shape(shapes[0], at), dtypes[0]

    return infer


def _solve_infer(shapes, dtypes, at):
    a, b = shapes
    _matrices("linalg_solve", a, True)
    if len(b) != len(a) or b[:-2] != a[:-2] or b[-2] != a[-1]:
        raise ShapeError(
            f"linalg.solve: shapes {a} and {b} do not fit (expected (..., n, n) and (..., n, k) with equal batch axes)"
        )
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"linalg.solve: expected one dtype, got {dtypes[0].name} and {dtypes[1].name}")
    check_dtype("linalg_solve", dtypes[0])
    return b, dtypes[0]


def _svd_shape(shape: tuple, at) -> tuple:
    m, n = shape[-2:]
    k = min(m, n)
    if not at["compute_uv"]:
        return (*shape[:-2], k)
    return (*shape[:-2], m + 1 + n, max(m, n) if at["full_matrices"] else k)


def _svd_infer(shapes, dtypes, at):
    _matrices("linalg_svd", shapes[0], False)
    check_dtype("linalg_svd", dtypes[0])
    return _svd_shape(shapes[0], at), dtypes[0]


def _qr_infer(shapes, dtypes, at):
    shape = shapes[0]
    _matrices("linalg_qr", shape, False)
    check_dtype("linalg_qr", dtypes[0])
    m, n = shape[-2:]
    return (*shape[:-2], m + n, min(m, n) if at["mode"] == "reduced" else m), dtypes[0]


# ------------------------------------------------------------------------------ references
def lapack(op: str, fn, arrays: list, what: str, check: bool = True):
    """``fn(*arrays)`` on one BLAS thread; a ``numpy.linalg.LinAlgError`` becomes lazyvic's
    LinAlgError naming the op, the shape and the first batch element that fails. Unchecked
    (``inv_ex``, ``cholesky_ex``; ``fn`` keeps the shape): NaN for the matrices that fail."""
    try:
        with one_thread():
            return fn(*arrays)
    except np.linalg.LinAlgError:
        pass
    a = arrays[0]
    if not check:
        out = np.full(a.shape, np.nan, dtype=a.dtype)
        for index in np.ndindex(a.shape[:-2]):
            try:
                with one_thread():
                    out[index] = fn(a[index])
            except np.linalg.LinAlgError:
                pass
        return out
    where = ""
    for index in np.ndindex(a.shape[:-2]):
        try:
            with one_thread():
                fn(*(x[index] for x in arrays))
        except np.linalg.LinAlgError:
            where = f" (batch element {index})" if index else ""
            break
    raise LinAlgError(f"{public_name(op)}: {what}; input of shape {a.shape}{where}") from None


def _inv(x, at):
    return lapack("linalg_inv", np.linalg.inv, x[:1], "the matrix is singular, it has no inverse", at["check_errors"])


def _det(x, at):
    return lapack("linalg_det", np.linalg.det, x[:1], "LU factorization failed")


def _slogdet(x, at):
    sign, logabs = lapack("linalg_slogdet", np.linalg.slogdet, x[:1], "LU factorization failed")
    return np.stack([sign, logabs], axis=-1)


def _solve(x, at):
    return lapack("linalg_solve", np.linalg.solve, x, "the matrix A is singular, the system has no unique solution")


def _cholesky(x, at):
    return lapack(
        "linalg_cholesky", np.linalg.cholesky, x[:1], "the matrix is not positive definite", at["check_errors"]
    )


def _zero_pivot(a: np.ndarray) -> int:
    """The 1-based column of the first exactly-zero pivot of the LU factorization with partial
    pivoting of ``a`` (LAPACK getrf's info), in ``a``'s precision."""
    a = a.copy()
    n = a.shape[-1]
    for j in range(n):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        if a[p, j] == 0:
            return j + 1
        a[[j, p]] = a[[p, j]]
        a[j + 1 :, j] /= a[j, j]
        a[j + 1 :, j + 1 :] -= np.outer(a[j + 1 :, j], a[j, j + 1 :])
    return n  # LAPACK found a zero pivot that this elimination rounded otherwise


def _not_positive_definite(a: np.ndarray) -> int:
    """The order of the first leading minor of ``a`` that is not positive definite (potrf's info)."""
    for k in range(1, a.shape[-1] + 1):
        try:
            np.linalg.cholesky(a[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return a.shape[-1]


def _info(x, at):
    a = x[0]
    factor, failed = (np.linalg.inv, _zero_pivot) if at["of"] == "inv" else (np.linalg.cholesky, _not_positive_definite)
    info = np.zeros(a.shape[:-2], dtype=np.int32)
    with one_thread():
        try:
            factor(a)  # the whole batch at once: matrix by matrix only when one fails
            return info
        except np.linalg.LinAlgError:
            pass
        for index in np.ndindex(a.shape[:-2]):
            try:
                factor(a[index])
            except np.linalg.LinAlgError:
                info[index] = failed(a[index])
    return info


def _info_infer(shapes, dtypes, at):
    op = f"linalg_{at['of']}_ex"
    _matrices(op, shapes[0], True)
    check_dtype(op, dtypes[0])
    return shapes[0][:-2], dt.int32


def _eigh(x, at):
    w, v = lapack(
        "linalg_eigh", lambda a: np.linalg.eigh(a, UPLO=at["uplo"]), x[:1], "the eigenvalue algorithm did not converge"
    )
    return np.concatenate([v, w[..., None]], axis=-1)


def _svd(x, at):
    a = x[0]
    if not at["compute_uv"]:
        return lapack(
            "linalg_svd", lambda a: np.linalg.svd(a, compute_uv=False), [a], "the SVD algorithm did not converge"
        )
    u, s, vh = lapack(
        "linalg_svd",
        lambda a: np.linalg.svd(a, full_matrices=at["full_matrices"]),
        [a],
        "the SVD algorithm did not converge",
    )
    m, n = a.shape[-2:]
    out = np.zeros(_svd_shape(a.shape, at), dtype=np.result_type(u, s))
    out[..., :m, : u.shape[-1]] = u
    out[..., m, : s.shape[-1]] = s
    out[..., m + 1 :, : vh.shape[-2]] = np.swapaxes(vh, -1, -2)
    return out


def _qr(x, at):
    q, r = lapack("linalg_qr", lambda a: np.linalg.qr(a, mode=at["mode"]), x[:1], "QR factorization failed")
    return np.concatenate([q, np.swapaxes(r, -1, -2)], axis=-2)


# ------------------------------------------------------------------------------------ VJPs
def _eye(like, n: int):
    """The (n, n) identity in ``like``'s dtype and device (a constant)."""
    return like.new_tensor(np.eye(n))


def _diag_embed(v):
    """(..., n) -> (..., n, n) with ``v`` on the diagonal."""
    return v.unsqueeze(-1) * _eye(v, v.shape[-1])


def _divide_where_nonzero(num, den):
    """``num / den``, with 0 where ``num`` is 0: an element of zero cotangent contributes nothing,
    also where ``den`` is 0 (eigenvalues or singular values that coincide, an unused factor),
    as PyTorch skips the terms of an undefined gradient."""
    return (num / den).where(num != 0, 0.0)


def _inv_vjp(g, x, out, at):
    """d(A^-1) = -A^-1 dA A^-1, so gA = -Y^T g Y^T with Y = A^-1 (Giles 2008, "An extended
    collection of matrix derivative results", section 2.2.1)."""
    y = out.mT
    return (-(y @ g @ y),)


def _det_vjp(g, x, out, at):
    """d det A = det A tr(A^-1 dA), so gA = g det A A^-T (Giles 2008, section 2.2.2). At a singular
    A the inverse does not exist and the gradient's sync raises LinAlgError (PyTorch goes through
    an SVD there)."""
    a = x[0]
    inv = a.apply("linalg_inv", a, check_errors=True)
    return ((g * out).unsqueeze(-1).unsqueeze(-1) * inv.mT,)


def _slogdet_vjp(g, x, out, at):
    """d log|det A| = tr(A^-1 dA): gA = g_logabsdet A^-T; the sign is piecewise constant (Giles 2008,
    section 2.2.2; PyTorch's ``slogdet_backward``)."""
    a = x[0]
    inv = a.apply("linalg_inv", a, check_errors=True)
    return (g.narrow(-1, 1, 1).unsqueeze(-1) * inv.mT,)


def _solve_vjp(g, x, out, at):
    """X = A^-1 B: gB = A^-T g, gA = -gB X^T (Giles 2008, section 2.3.1; PyTorch's
    ``linalg_solve_backward``)."""
    a, _ = x
    gb = a.apply("linalg_solve", a.mT, g)
    return -(gb @ out.mT), gb


def _cholesky_vjp(g, x, out, at):
    """A = L L^T: gA = L^-T Phi(L^T gL) L^-1 with Phi(X) = (tril(X) + tril(X, -1)^T) / 2, the
    symmetric matrix whose lower triangle is tril(X) with its diagonal halved (Murray 2016,
    "Differentiation of the Cholesky decomposition", eq. 10; PyTorch's ``cholesky_backward``)."""
    low = out
    phi = (low.mT @ g).tril()
    phi = (phi + phi.tril(-1).mT) * 0.5
    left = low.apply("linalg_solve", low.mT, phi)  # L^-T Phi
    return (low.apply("linalg_solve", low.mT, left.mT).mT,)  # (L^-T (L^-T Phi)^T)^T = L^-T Phi L^-1


def _eigh_vjp(g, x, out, at):
    """A = V diag(w) V^T: gA = V (diag(gw) + skew(V^T gV) / E) V^T with skew(X) = (X - X^T) / 2,
    E_ij = w_j - w_i off the diagonal (Giles 2008, section 3.1; PyTorch's ``linalg_eig_backward``
    for Hermitian inputs, which projects V^T gV on the skew-symmetric matrices). The result is
    symmetric: the gradient with respect to a symmetric A, whichever triangle ``uplo`` read."""
    n = out.shape[-2]
    v, w = out.narrow(-1, 0, n), out.select(-1, n)
    gv, gw = g.narrow(-1, 0, n), g.select(-1, n)
    vtgv = v.mT @ gv
    skew = (vtgv - vtgv.mT) * 0.5
    gaps = w.unsqueeze(-2) - w.unsqueeze(-1) + _eye(w, n)  # 1 on the diagonal, where skew is 0
    inner = _divide_where_nonzero(skew, gaps) + _diag_embed(gw)
    return (v @ inner @ v.mT,)


def _svd_factors(out, m: int, n: int, k: int):
    """U (..., m, k), S (..., k), V (..., n, k) of a packed SVD (the first k columns of full ones)."""
    u = out.narrow(-2, 0, m).narrow(-1, 0, k)
    s = out.select(-2, m).narrow(-1, 0, k)
    v = out.narrow(-2, m + 1, n).narrow(-1, 0, k)
    return u, s, v


def svd_backward(gu, gs, gv, u, s, v):
    """The cotangent of A = U diag(S) V^T from those of the reduced factors (PyTorch's
    ``svd_backward``; Townsend 2016, "Differentiating the Singular Value Decomposition"):

        gA = U [(skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS)] V^T
             + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T)

    with skew(X) = X - X^T and E_ij = S_j^2 - S_i^2 off the diagonal. Terms of zero cotangent
    are left out (:func:`_divide_where_nonzero`), as PyTorch skips undefined ones."""
    m, n = u.shape[-2], v.shape[-2]
    vh = v.mT
    if gu is None and gv is None:
        return (u * gs.unsqueeze(-2)) @ vh
    uhgu = u.mT @ gu
    uhgu = uhgu - uhgu.mT
    vhgv = v.mT @ gv
    vhgv = vhgv - vhgv.mT
    s2 = s * s
    gaps = s2.unsqueeze(-2) - s2.unsqueeze(-1) + _eye(s, s.shape[-1])
    inner = _divide_where_nonzero(uhgu * s.unsqueeze(-2) + s.unsqueeze(-1) * vhgv, gaps) + _diag_embed(gs)
    if m > n:
        gu_sinv = _divide_where_nonzero(gu, s.unsqueeze(-2))
        ga = u @ inner + gu_sinv - u @ (u.mT @ gu_sinv)
        return ga @ vh
    if m < n:
        sinv_gvh = _divide_where_nonzero(gv.mT, s.unsqueeze(-1))
        ga = inner @ vh + sinv_gvh - (sinv_gvh @ v) @ vh
        return u @ ga
    return u @ inner @ vh


def _svd_vjp(g, x, out, at):
    """See :func:`svd_backward`. ``full_matrices``: the columns of U and V past k are not
    determined by A; as PyTorch, only the first k enter the gradient. The singular values
    alone (``compute_uv=False``): gA = U diag(gS) V^T, from a reduced SVD recorded here."""
    a = x[0]
    m, n = a.shape[-2:]
    k = min(m, n)
    if not at["compute_uv"]:
        u, _, v = _svd_factors(a.apply("linalg_svd", a, full_matrices=False, compute_uv=True), m, n, k)
        return (svd_backward(None, g, None, u, None, v),)
    u, s, v = _svd_factors(out, m, n, k)
    gu, gs, gv = _svd_factors(g, m, n, k)
    return (svd_backward(gu, gs, gv, u, s, v),)


def _qr_vjp(g, x, out, at):
    """A = Q R (PyTorch's ``linalg_qr_backward``; Walter and Lehmann 2018, "Algorithmic
    differentiation of linear algebra functions with application in optimum experimental design",
    and Roberts and Roberts 2020, arXiv:2009.10071, sections 4.3 and 4.5):

        m >= n: gA = (gQ + Q copyltu(M)) R^-T,  M = gR R^T - Q^T gQ, copyltu(M) the symmetric
                matrix of triu(M) (its strict upper triangle mirrored below);
        m < n:  gA = [Q tril(W - W^T) R1^-T | 0] + Q gR,  W = Q^T gQ - gR R^T, R1 = R[:, :m].

    Raises:
        UnsupportedOpError: ``mode="complete"`` with m > n (Q's last m - n columns are not
            determined by A), as PyTorch.
    """
    a = x[0]
    m, n = a.shape[-2:]
    if at["mode"] == "complete" and m > n:
        raise UnsupportedOpError(
            f"linalg.qr: the QR decomposition of shape {a.shape} is not differentiable with mode='complete' "
            f"and more rows than columns (PyTorch raises too); use mode='reduced'"
        )
    q, r = out.narrow(-2, 0, m), out.narrow(-2, m, n).mT
    gq, gr = g.narrow(-2, 0, m), g.narrow(-2, m, n).mT
    if m >= n:
        upper = (gr @ r.mT - q.mT @ gq).triu()
        b = gq + q @ (upper + upper.triu(1).mT)
        return (a.apply("linalg_solve", r, b.mT).mT,)  # b R^-T
    w = q.mT @ gq - gr @ r.mT
    lower = (w - w.mT).tril()
    r1 = r.narrow(-1, 0, m)
    lead = a.apply("linalg_solve", r1, (q @ lower).mT).mT  # (Q tril(W - W^T)) R1^-T
    return (lead._pad(((0, 0),) * (a.ndim - 1) + ((0, n - m),)) + q @ gr,)


# ---------------------------------------------------------------------------------- table
register(OpDef("linalg_inv", LINALG_KIND, 1, _square_infer("linalg_inv", lambda s, at: s), _inv, vjp=_inv_vjp))
register(
    OpDef(
        "linalg_det",
        LINALG_KIND,
        1,
        _square_infer("linalg_det", lambda s, at: s[:-2]),
        _det,
        vjp=_det_vjp,
        onnx=onnx_node("Det", since=(11,)),
    )
)
register(
    OpDef(
        "linalg_slogdet",
        LINALG_KIND,
        1,
        _square_infer("linalg_slogdet", lambda s, at: (*s[:-2], 2)),
        _slogdet,
        vjp=_slogdet_vjp,
    )
)
register(OpDef("linalg_solve", LINALG_KIND, 2, _solve_infer, _solve, vjp=_solve_vjp))
register(
    OpDef(
        "linalg_cholesky",
        LINALG_KIND,
        1,
        _square_infer("linalg_cholesky", lambda s, at: s),
        _cholesky,
        vjp=_cholesky_vjp,
    )
)
register(
    OpDef(
        "linalg_eigh",
        LINALG_KIND,
        1,
        _square_infer("linalg_eigh", lambda s, at: (*s[:-1], s[-1] + 1)),
        _eigh,
        vjp=_eigh_vjp,
    )
)
register(OpDef("linalg_info", LINALG_KIND, 1, _info_infer, _info, differentiable=False))
register(OpDef("linalg_svd", LINALG_KIND, 1, _svd_infer, _svd, vjp=_svd_vjp))
register(OpDef("linalg_qr", LINALG_KIND, 1, _qr_infer, _qr, vjp=_qr_vjp))
