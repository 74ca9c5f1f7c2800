"""``lazyvic.linalg`` decompositions and solvers (lazyvic/ops/linalg.py, lazyvic/linalg.py).

Forward values against NumPy's float64 LAPACK (batched, float32 and float64), invariants where
LAPACK chooses signs (U diag(S) Vh == A, orthonormal factors, V diag(w) V^T == A), gradients against
float64 finite differences, values and gradients against PyTorch (tests/fixtures/
make_linalg_fixtures.py), in the interpreter and in compiled plans (the ``mode`` fixture), which
must give the same bits; and each typed error. The VJP of every primitive is also in
tests/test_vjp.py's VJP_CASES, its forward in tests/test_ops_forward.py's PRIMITIVE_CASES. The
matrices stay (2, 3, 3), (2, 4, 3) and (3, 4): few shapes, few compiled kernels.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _oracle import check_vjp
from _torch_fixtures import arrays

import lazyvic as lv
from lazyvic import errors
from lazyvic.ops import OPS
from lazyvic.runtime import metrics
from lazyvic.runtime.config import config

L = lv.linalg
TOL = {"float32": dict(rtol=2e-4, atol=2e-5), "float64": dict(rtol=1e-10, atol=1e-12)}


def _r(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape)


def _well(*shape, seed=0):
    """Square matrices far from singular."""
    return _r(*shape, seed=seed) + 2.5 * np.eye(shape[-1])


def _close(got, want, dtype):
    got = got.numpy() if isinstance(got, lv.Tensor) else got
    np.testing.assert_allclose(got, want, **TOL[dtype])


def _eye(n):
    return np.eye(n)


# ------------------------------------------------------------------------ forward vs NumPy
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_matches_numpy(dtype, mode):
    """Every function on batched inputs, in one trace, against NumPy's float64 LAPACK."""
    a64, b64 = _well(2, 3, 3), _r(2, 3, 2, seed=1)
    tall64, wide64 = _r(2, 4, 3, seed=2), _r(3, 4, seed=3)
    a, b, tall, wide = (x.astype(dtype) for x in (a64, b64, tall64, wide64))
    a64, b64, tall64, wide64 = (x.astype(dtype).astype(np.float64) for x in (a, b, tall, wide))
    spd64 = a64 @ a64.transpose(0, 2, 1)
    sym64 = a64 + a64.transpose(0, 2, 1)
    A, B, T, W = (lv.tensor(x) for x in (a, b, tall, wide))
    S, Y = lv.tensor(spd64.astype(dtype)), lv.tensor(sym64.astype(dtype))
    bvec = b[0, :, 0]
    lo = np.tril(a64)
    outs = [
        (L.inv(A), np.linalg.inv(a64)),
        (A.inverse(), np.linalg.inv(a64)),
        (L.det(A), np.linalg.det(a64)),
        (lv.det(-A), np.linalg.det(-a64)),
        (lv.stack(list(L.slogdet(-A))), np.stack(np.linalg.slogdet(-a64))),
        (lv.logdet(A), np.log(np.linalg.det(a64))),
        (L.solve(A, B), np.linalg.solve(a64, b64)),
        (L.solve(A, lv.tensor(bvec)), np.linalg.solve(a64, bvec.astype(np.float64)[None, :, None])[..., 0]),
        (L.solve(A[0], B), np.linalg.solve(a64[0], b64)),  # A's batch broadcast
        (L.solve(A, B.mT, left=False), np.swapaxes(np.linalg.solve(np.swapaxes(a64, -1, -2), b64), -1, -2)),
        (L.solve_triangular(A, B, upper=False), np.linalg.solve(lo, b64)),
        (L.cholesky(S), np.linalg.cholesky(spd64)),
        (L.cholesky(S, upper=True), np.swapaxes(np.linalg.cholesky(spd64), -1, -2)),
        (lv.cholesky_inverse(L.cholesky(S)), np.linalg.inv(spd64)),
        (lv.cholesky_solve(B, L.cholesky(S)), np.linalg.solve(spd64, b64)),
        (L.eigvalsh(Y), np.linalg.eigvalsh(sym64)),
        (L.eigvalsh(Y.triu(), UPLO="U"), np.linalg.eigvalsh(sym64)),
        (L.svdvals(T), np.linalg.svd(tall64, compute_uv=False)),
        (L.svd(W).S, np.linalg.svd(wide64, compute_uv=False)),
        (L.pinv(T), np.linalg.pinv(tall64)),
        (L.pinv(Y, hermitian=True), np.linalg.pinv(sym64)),
        (L.lstsq(T, lv.tensor(tall[..., :2] + 1)).solution, np.linalg.pinv(tall64) @ (tall64[..., :2] + 1)),
        (L.matrix_power(A, -3), np.stack([np.linalg.matrix_power(m, -3) for m in a64])),
        (L.matrix_power(A, 5), np.stack([np.linalg.matrix_power(m, 5) for m in a64])),
        (L.cond(A), np.linalg.cond(a64)),
        (L.matrix_norm(T, 2), np.linalg.norm(tall64, 2, axis=(-2, -1))),
        (L.matrix_norm(T, "nuc"), np.linalg.norm(tall64, "nuc", axis=(-2, -1))),
    ]
    lv.sync(*[t for t, _ in outs])
    for k, (t, want) in enumerate(outs):
        assert t.dtype.name == dtype, k
        _close(t, want.astype(dtype).astype(np.float64) if dtype == "float32" else want, dtype)
    assert L.matrix_rank(T).dtype == lv.int64


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_factors_satisfy_their_invariants(dtype, mode):
    """Signs are LAPACK's choice: the factors are checked by what defines them."""
    tall, wide = _r(2, 4, 3, seed=2).astype(dtype), _r(3, 4, seed=3).astype(dtype)
    sym = (_well(2, 3, 3) + _well(2, 3, 3).transpose(0, 2, 1)).astype(dtype)
    T, W, Y = lv.tensor(tall), lv.tensor(wide), lv.tensor(sym)
    w, v = L.eigh(Y)
    u, s, vh = L.svd(T, full_matrices=False)
    uf, sf, vhf = L.svd(T)  # full: (4, 4), (3,), (3, 3)
    wu, ws, wvh = L.svd(W, full_matrices=False)
    q, r = L.qr(T)
    qc, rc = L.qr(T, mode="complete")
    qw, rw = L.qr(W)
    q0, r_only = L.qr(T, mode="r")
    lu, ls, lvv = lv.svd(T)  # torch.svd: V, not Vh
    lv.sync()
    checks = {
        "eigh": ((v * w.unsqueeze(-2)) @ v.mT, sym),
        "eigh_orthonormal": (v.mT @ v, np.broadcast_to(_eye(3), (2, 3, 3))),
        "svd": ((u * s.unsqueeze(-2)) @ vh, tall),
        "svd_orthonormal": (u.mT @ u, np.broadcast_to(_eye(3), (2, 3, 3))),
        "svd_full_u": (uf.mT @ uf, np.broadcast_to(_eye(4), (2, 4, 4))),
        "svd_full": ((uf[..., :3] * sf.unsqueeze(-2)) @ vhf, tall),
        "svd_wide": ((wu * ws.unsqueeze(-2)) @ wvh, wide),
        "legacy_svd": ((lu * ls.unsqueeze(-2)) @ lvv.mT, tall),
        "qr": (q @ r, tall),
        "qr_orthonormal": (q.mT @ q, np.broadcast_to(_eye(3), (2, 3, 3))),
        "qr_upper": (r.tril(-1), np.zeros((2, 3, 3))),
        "qr_complete": (qc @ rc, tall),
        "qr_complete_orthonormal": (qc.mT @ qc, np.broadcast_to(_eye(4), (2, 4, 4))),
        "qr_wide": (qw @ rw, wide),
        "qr_r": (r_only.abs(), np.abs(r.numpy())),
    }
    for name, (got, want) in checks.items():
        np.testing.assert_allclose(got.numpy(), want, err_msg=name, **TOL[dtype])
    assert (uf.shape, vhf.shape, qc.shape, rc.shape, q0.shape) == ((2, 4, 4), (2, 3, 3), (2, 4, 4), (2, 4, 3), (0,))
    np.testing.assert_allclose(w.numpy(), np.linalg.eigvalsh(sym), **TOL[dtype])
    assert np.all(np.diff(w.numpy(), axis=-1) >= 0) and np.all(np.diff(s.numpy(), axis=-1) <= 0)


def test_rank_lstsq_and_pinv_of_rank_deficient_matrices(mode):
    """matrix_rank, pinv and lstsq's rank, residuals and singular values, as PyTorch's drivers give them."""
    rng = np.random.default_rng(4)
    low = rng.normal(size=(4, 2)) @ rng.normal(size=(2, 3))  # rank 2
    full = rng.normal(size=(2, 4, 3))
    rhs = rng.normal(size=(2, 4, 2))
    X, F = lv.tensor(low), lv.tensor(full)
    assert L.matrix_rank(X).item() == 2 and L.matrix_rank(X, hermitian=False, atol=1e3).item() == 0
    assert L.matrix_rank(lv.tensor(low @ low.T), hermitian=True).item() == 2
    assert L.matrix_rank(X, tol=1e-8).item() == 2
    np.testing.assert_allclose(L.pinv(X).numpy(), np.linalg.pinv(low), **TOL["float64"])
    gelsy = L.lstsq(F, lv.tensor(rhs))
    gelsd = L.lstsq(F, lv.tensor(rhs), driver="gelsd")
    want, res, _, sv = np.linalg.lstsq(full[0], rhs[0], rcond=None)
    np.testing.assert_allclose(gelsy.solution.numpy()[0], want, **TOL["float64"])
    assert gelsy.residuals.shape == (0,) and gelsy.singular_values.shape == (0,)
    assert gelsy.rank.tolist() == [3, 3] and gelsy.rank.dtype == lv.int64
    np.testing.assert_allclose(gelsd.residuals.numpy()[0], res, **TOL["float64"])
    np.testing.assert_allclose(gelsd.singular_values.numpy()[0], sv, **TOL["float64"])
    gels = L.lstsq(F, lv.tensor(rhs[..., 0]), driver="gels")  # one vector per matrix
    assert gels.solution.shape == (2, 3) and gels.rank.shape == (0,) and gels.residuals.shape == (2, 1)
    assert L.lstsq(F, lv.tensor(rhs[..., 0])).residuals.shape == (0,)  # gelsy: none


def test_ex_variants_report_instead_of_raising(mode):
    singular = np.array([[[2.0, 1.0], [1.0, 3.0]], [[1.0, 2.0], [2.0, 4.0]]])
    inverse, info = L.inv_ex(lv.tensor(singular))
    assert info.tolist() == [0, 2] and info.dtype == lv.int32
    np.testing.assert_allclose(inverse.numpy()[0], np.linalg.inv(singular[0]))
    assert np.isnan(inverse.numpy()[1]).all()
    indefinite = np.array([[[4.0, 2.0], [2.0, 3.0]], [[1.0, 2.0], [2.0, 1.0]]])
    low, info = L.cholesky_ex(lv.tensor(indefinite))
    assert info.tolist() == [0, 2]
    np.testing.assert_allclose(low.numpy()[0], np.linalg.cholesky(indefinite[0]))
    with pytest.raises(errors.LinAlgError):
        L.cholesky_ex(lv.tensor(indefinite), check_errors=True).L.numpy()


# ----------------------------------------------------------------------- one numerics, no fallback
def _all_functions(x, s, t):
    return [
        L.inv(x),
        L.det(x),
        L.slogdet(x).logabsdet,
        L.solve(x, t[..., :3, :2]),
        L.cholesky(s),
        L.eigh(s).eigenvectors.abs(),
        L.svd(t, full_matrices=False).U.abs(),
        L.qr(t).R.abs(),
        L.pinv(t),
    ]


def test_compiled_plans_run_lapack_as_library_steps_with_the_interpreters_bits(monkeypatch):
    """The same trace interpreted and compiled: the same bits, and no linalg op reported as a fallback."""
    x, t = _well(2, 3, 3).astype(np.float32), _r(2, 4, 3, seed=2).astype(np.float32)
    s = x @ x.transpose(0, 2, 1)
    runs = []
    for tier in ("never", "always"):
        monkeypatch.setattr(config, "compile", tier)
        metrics.reset()
        outs = _all_functions(*(lv.tensor(v) for v in (x, s, t)))
        lv.sync(*outs)
        runs.append([o.numpy() for o in outs])
        snap = metrics.snapshot()
    assert snap["compiled_runs"] >= 1, snap
    assert not set(snap["fallback_ops"]) & {op for op, d in OPS.items() if d.kind == "linalg"}, snap["fallback_ops"]
    for k, (interpreted, compiled) in enumerate(zip(*runs)):
        np.testing.assert_array_equal(interpreted, compiled, err_msg=f"output {k}")


@pytest.mark.parametrize(
    "fn, inputs",
    [
        (lambda a, b: L.solve(a, b, left=False), [_well(3, 3), _r(2, 3, seed=1)]),
        (lambda x: L.cholesky(x @ x.mT + lv.tensor(_eye(3)), upper=True), [_r(2, 3, 3)]),
        (lambda x: L.eigvalsh(x + x.mT, UPLO="U"), [_r(2, 3, 3)]),
        (lambda x: L.svd(x).S, [_r(2, 4, 3)]),
        (lambda x: lv.cat([f.reshape(-1) for f in L.qr(x, mode="complete")]), [_r(3, 3)]),
        (lambda x: L.pinv(x + x.mT, hermitian=True), [_r(3, 3)]),
        (lambda a, b: L.lstsq(a, b).solution, [_r(4, 3), _r(4, 2, seed=1)]),
        (lambda x: L.matrix_power(x, -2) + lv.logdet(x) + L.cond(x), [_well(3, 3)]),
        (lambda x, b: lv.cholesky_solve(b, L.cholesky(x @ x.mT + lv.tensor(_eye(3)))), [_r(3, 3), _r(3, 2, seed=1)]),
        (lambda a, b: L.solve_triangular(a, b, upper=False, unitriangular=True), [_r(3, 3), _r(3, 2, seed=1)]),
        (lambda x: L.matrix_norm(x, "nuc") + L.matrix_norm(x, -2), [_r(2, 4, 3)]),
    ],
    ids=["solve_right", "cholesky_upper", "eigvalsh_upper", "svd_full_S", "qr_complete_square", "pinv_hermitian",
         "lstsq", "matrix_power_logdet_cond", "cholesky_solve", "solve_triangular_unit", "spectral_nuclear_norms"],
)  # fmt: skip
def test_gradients_match_finite_differences(fn, inputs, mode):
    check_vjp(fn, *inputs)


def test_gradients_where_eigenvalues_or_singular_values_coincide():
    """Unused factors contribute nothing (no 0/0): eigvalsh at the identity, svdvals of a rank-deficient
    matrix, the singular values of a full SVD of a rank-deficient matrix."""
    x = lv.tensor(np.eye(3), requires_grad=True)
    (L.eigvalsh(x) * lv.tensor([1.0, 2.0, 3.0], dtype=lv.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.diag([1.0, 2.0, 3.0]), atol=1e-15)
    low = np.outer([1.0, 2.0, 0.5, -1.0], [0.3, -0.2, 1.0])  # rank 1: two zero singular values
    y = lv.tensor(low, requires_grad=True)
    L.svdvals(y)[0].backward()
    z = lv.tensor(low, requires_grad=True)
    L.svd(z, full_matrices=False).S[0].backward()
    u, _, vh = np.linalg.svd(low)
    want = np.outer(u[:, 0], vh[0])  # d S_0 / dA = u_0 v_0^T
    np.testing.assert_allclose(y.grad.numpy(), want, atol=1e-12)
    np.testing.assert_allclose(z.grad.numpy(), want, atol=1e-12)


# -------------------------------------------------------------------------------- PyTorch
FIXTURE = "torch_linalg.npz"


def _cotangent(shape):
    """tests/fixtures/make_linalg_fixtures.py's pattern."""
    n = int(np.prod(shape, dtype=np.int64))
    return np.sin(1.0 + 0.7 * np.arange(n)).reshape(shape)


def _fixture_cases():
    with np.load(__import__("_torch_fixtures").FIXTURES / FIXTURE) as data:
        return json.loads(str(data["spec"]))["cases"]


@pytest.mark.parametrize("case", _fixture_cases(), ids=lambda c: c[0])
def test_values_and_gradients_match_pytorch(case, mode):
    ref = arrays(FIXTURE)
    name, fn, args, field = case
    leaves = [lv.tensor(ref[f"x.{a}"], requires_grad=True) for a in args]
    y = getattr(L, fn)(*leaves)
    if field is not None:
        y = getattr(y, field)
    want = ref[f"{name}.out"]
    if y.dtype == lv.int64:
        assert y.numpy().tolist() == want.tolist()
        return
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-10, atol=1e-12)
    grads = [k for k in range(len(args)) if f"{name}.grad.{k}" in ref]
    if not grads:
        return
    (y * lv.tensor(_cotangent(y.shape))).sum().backward()
    for k in grads:
        np.testing.assert_allclose(leaves[k].grad.numpy(), ref[f"{name}.grad.{k}"], rtol=1e-9, atol=1e-11)


# ---------------------------------------------------------------------------------- errors
def test_shape_and_dtype_errors_name_the_op_when_recorded():
    square, rect = lv.ones(2, 3, 3) * 2.0, lv.ones(2, 3, 4)
    for fn, name in [(L.inv, "linalg.inv"), (L.det, "linalg.det"), (L.cholesky, "linalg.cholesky"),
                     (L.eigh, "linalg.eigh"), (L.slogdet, "linalg.slogdet")]:  # fmt: skip
        with pytest.raises(errors.ShapeError, match=rf"{name}: expected square matrices .*\(2, 3, 4\)"):
            fn(rect)
        with pytest.raises(errors.DTypeError, match=rf"{name}: expected a float32 or float64 input, got int64"):
            fn(lv.ones(3, 3, dtype=lv.int64))
        with pytest.raises(errors.DTypeError, match=rf"{name}: float16 is not supported"):
            fn(lv.ones(3, 3, dtype=lv.float16))
    with pytest.raises(errors.ShapeError, match=r"linalg.svd: expected a \(..., m, n\) input .* shape \(3,\)"):
        L.svd(lv.ones(3))
    with pytest.raises(errors.DTypeError, match="linalg.svdvals: .* got bool"):
        L.svdvals(lv.ones(3, 3, dtype=lv.bool))
    with pytest.raises(errors.ShapeError, match=r"linalg.solve: A of shape \(2, 3, 3\) and B of shape \(2, 4, 1\)"):
        L.solve(square, lv.ones(2, 4, 1))
    with pytest.raises(errors.ShapeError, match=r"linalg.solve: .*\(2,\) and \(3,\)"):
        L.solve(square, lv.ones(3, 3, 1))  # batch axes (2,) and (3,) do not broadcast
    with pytest.raises(errors.DTypeError, match="linalg.solve: expected one dtype, got float32 and float64"):
        L.solve(square, lv.ones(2, 3, 1, dtype=lv.float64))
    with pytest.raises(errors.ShapeError, match=r"linalg.lstsq: .*B's rows must be 3"):
        L.lstsq(rect, lv.ones(2, 4, 1))
    with pytest.raises(errors.ArgumentError, match="linalg.eigh: UPLO must be 'L' or 'U', got 'X'"):
        L.eigh(square, UPLO="X")
    with pytest.raises(errors.ArgumentError, match="linalg.qr: mode"):
        L.qr(square, mode="full")
    with pytest.raises(errors.ArgumentError, match="linalg.lstsq: driver"):
        L.lstsq(square, square, driver="gelsx")
    assert square.is_lazy  # nothing ran


@pytest.mark.parametrize(
    "fn, what",
    [
        (lambda x: L.inv(x), "linalg.inv: the matrix is singular"),
        (lambda x: L.solve(x, lv.ones(2, 2, 1)), "linalg.solve: the matrix A is singular"),
        (lambda x: L.cholesky(x), "linalg.cholesky: the matrix is not positive definite"),
        (lambda x: L.det(x).exp() + L.inv(x).sum((-2, -1)), "linalg.inv: the matrix is singular"),
    ],
    ids=["inv", "solve", "cholesky", "inside_a_trace"],
)
def test_singular_matrices_raise_linalg_error_at_the_sync(fn, what, mode):
    """Raised at the sync, in the interpreter and in compiled plans alike, naming the op, the shape
    and the batch element; never NumPy's LinAlgError. The session stays usable."""
    x = lv.tensor(np.array([[[2.0, 1.0], [1.0, 3.0]], [[1.0, 2.0], [2.0, 4.0]]], np.float32))
    y = fn(x)  # recording succeeds: nothing is computed yet
    with pytest.raises(errors.LinAlgError) as info:
        y.numpy()
    assert not isinstance(info.value, np.linalg.LinAlgError) and isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert what in message and "(2, 2, 2)" in message and "batch element (1,)" in message, message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    np.testing.assert_allclose(L.det(x[:1]).numpy(), [5.0])


def test_gradient_errors():
    x = lv.tensor(_r(4, 3), requires_grad=True)
    q, r = L.qr(x, mode="complete")
    with pytest.raises(
        errors.UnsupportedOpError, match=r"linalg.qr: .*\(4, 3\) is not differentiable with mode='complete'"
    ):
        (q.sum() + r.sum()).backward()
    with pytest.raises(errors.UnsupportedOpError, match="linalg.eig: lazyvic has no complex dtype"):
        L.eig(x)
    with pytest.raises(errors.UnsupportedOpError, match="linalg.eigvals"):
        L.eigvals(x)


# ------------------------------------------------------------------- PyTorch's other names
def test_tensor_methods_and_module_functions():
    a = _well(2, 3, 3)
    A = lv.tensor(a)
    spd = a @ a.transpose(0, 2, 1)
    S = lv.tensor(spd)
    pairs = [
        (A.inverse(), np.linalg.inv(a)),
        (lv.inverse(A), np.linalg.inv(a)),
        (A.det(), np.linalg.det(a)),
        (A.logdet(), np.log(np.linalg.det(a))),
        (lv.slogdet(A).logabsdet, np.linalg.slogdet(a)[1]),
        (A.slogdet().sign, np.linalg.slogdet(a)[0]),
        (A.matrix_power(2), a @ a),
        (lv.matrix_power(A, 0), np.broadcast_to(np.eye(3), (2, 3, 3))),
        (S.cholesky(), np.linalg.cholesky(spd)),
        (lv.cholesky(S, upper=True), np.swapaxes(np.linalg.cholesky(spd), -1, -2)),
        (A.pinverse(), np.linalg.pinv(a)),
        (lv.pinverse(A), np.linalg.pinv(a)),
        (A.svd().S, np.linalg.svd(a, compute_uv=False)),
        (lv.svd(A, compute_uv=False).U, np.zeros((2, 3, 3))),
        (lv.qr(A).R.abs(), np.abs(np.linalg.qr(a)[1])),
        (A.cholesky_solve(S.cholesky()), np.linalg.solve(spd, a)),
        (lv.cholesky_inverse(S.cholesky().mT, upper=True), np.linalg.inv(spd)),
        (A.norm("nuc"), np.linalg.norm(a, "nuc", axis=(-2, -1))),
    ]
    for k, (got, want) in enumerate(pairs):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12, err_msg=str(k))
    u, s, v = lv.svd(A, some=False)
    assert u.shape == (2, 3, 3) and v.shape == (2, 3, 3)
    np.testing.assert_allclose(((u * s.unsqueeze(-2)) @ v.mT).numpy(), a, rtol=1e-10)
    assert lv.linalg.LinAlgError is errors.LinAlgError


# -------------------------------------------------------------------------------------- ONNX
def test_det_exports_to_onnx_and_imports_back():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    x = _well(2, 3, 3).astype(np.float32)
    model = lv.onnx.export(lambda t: L.det(t) * 2.0, x, opset_version=13)
    onnx.checker.check_model(model)
    assert "Det" in {n.op_type for n in model.graph.node}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input": x})
    np.testing.assert_allclose(got, 2 * np.linalg.det(x.astype(np.float64)), rtol=1e-5)
    back = lv.onnx.load(model)(lv.tensor(x))
    np.testing.assert_allclose(back.numpy(), got, rtol=1e-6)
    with pytest.raises(errors.UnsupportedOpError, match="linalg_inv"):
        lv.onnx.export(lambda t: L.inv(t), x, opset_version=13)
