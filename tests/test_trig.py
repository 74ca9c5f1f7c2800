"""The inverse trigonometric and hyperbolic functions (``atan`` ``asin`` ``acos`` ``sinh`` ``cosh``
``asinh`` ``acosh`` ``atanh``), ``atan2``, ``logaddexp`` / ``logaddexp2`` and ``deg2rad`` /
``rad2deg``, with PyTorch's aliases (``arcsin`` ...) and in-place methods.

- PyTorch code run with ``torch`` bound to lazyvic against the values, dtypes and gradients real
  PyTorch 2.13 gave (tests/fixtures/torch_trig.npz, made by make_trig_fixtures.py): special
  values in float16/32/64, integer and bool inputs, atan2's signed zeros, broadcasting and mixed
  dtypes, the aliases and in-place methods, every gradient. Interpreted (no compiling).
- NumPy over a grid of values, and the interpreter and a compiled plan giving the same bits
  (one numerics: ops/numerics.py, ops/libm.py).
- The overflow bounds of the sinh/cosh guards are the C library's; composites' gradients against
  finite differences; the errors.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _oracle import check_vjp
from _torch_fixtures import arrays, spec

import lazyvic as lv
from lazyvic import errors
from lazyvic.ops import libm
from lazyvic.ops.elementwise import _HYPERBOLIC_MAX
from lazyvic.runtime.check import same_bits
from lazyvic.runtime.config import config

FIXTURE = "torch_trig.npz"
DATA = arrays(FIXTURE)
CASES = {case["name"]: case for case in spec(FIXTURE)}
_TOL = {
    np.dtype(np.float16): dict(rtol=1e-3, atol=0),
    np.dtype(np.float32): dict(rtol=3e-7, atol=0),
    np.dtype(np.float64): dict(rtol=5e-16, atol=0),
}
INF, NAN = math.inf, math.nan


def _flatten(out) -> list:
    return [v for o in out for v in _flatten(o)] if isinstance(out, (tuple, list)) else [out]


def _assert_same_values(got: np.ndarray, want: np.ndarray, where: str) -> None:
    """Within a few ulp (``_TOL``), infinities and NaN where ``want`` has them, zeros of its sign."""
    np.testing.assert_allclose(got, want, equal_nan=True, err_msg=where, **_TOL[want.dtype])
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"{where}: sign of zero")


# The one known difference: PyTorch's float32 sinh and cosh overflow to inf from |x| = 88.72 on (where
# exp(x) does), though the result is finite up to 89.42; lazyvic gives the finite value, as C's
# sinhf/coshf and NumPy do. (fixture output -> the NumPy function it should be)
EARLY_OVERFLOW = {("unary_float32", 3): np.sinh, ("unary_float32", 4): np.cosh}


def _without_early_overflow(x: np.ndarray, want: np.ndarray, fn) -> np.ndarray:
    early = np.isinf(want) & (np.abs(x) > 88.72) & (np.abs(x) <= _HYPERBOLIC_MAX["float32"])
    assert early.any(), "PyTorch no longer overflows early: remove EARLY_OVERFLOW"
    with np.errstate(over="ignore"):
        return np.where(early, fn(x.astype(np.float64)).astype(np.float32), want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pytorch_code_gives_pytorch_results(name, monkeypatch):
    monkeypatch.setattr(config, "compile", "never")
    case = CASES[name]
    env = {"torch": lv}
    for k in case["inputs"]:
        env[k] = lv.tensor(DATA[f"{name}.in.{k}"], requires_grad=k in case["grad"])
    exec(case["code"], env)
    outs = _flatten(env["out"])
    assert len(outs) == case["outputs"], f"{name}: {len(outs)} outputs, PyTorch gave {case['outputs']}"
    for k, got in enumerate(outs):
        want, where = DATA[f"{name}.out.{k}"], f"{name} output {k}"
        if (name, k) in EARLY_OVERFLOW:
            want = _without_early_overflow(DATA[f"{name}.in.a"], want, EARLY_OVERFLOW[name, k])
        assert got.shape == want.shape, f"{where}: shape {got.shape}, PyTorch {want.shape}"
        assert got.dtype.np == want.dtype, f"{where}: dtype {got.dtype}, PyTorch {want.dtype}"
        _assert_same_values(got.numpy(), want, where)
    if case["grad"]:
        out = env["out"]
        w = lv.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(*out.shape)
        (out * w).sum().backward()
        for k in case["grad"]:
            want = DATA[f"{name}.grad.{k}"]
            np.testing.assert_allclose(env[k].grad.numpy(), want, rtol=1e-12, atol=1e-14, err_msg=f"{name} grad {k}")


# ------------------------------------------------------------- NumPy, and one numerics
SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-40, -1e-40, 1e-310, 0.5, -0.5, 1.0, -1.0, 0.9999999, -0.9999999]
SPECIAL += [1.0000001, -1.0000001, 2.0, -2.0, 88.0, 89.4, 89.5, -89.5, 710.0, 710.5, -710.5, 1e30, -1e30]
SPECIAL += [1e300, -1e300, INF, -INF, NAN]

UNARY = {
    "atan": np.arctan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}


def _values(dtype) -> tuple:
    """x and a permutation of it: special values, values in [-1, 1], and values of several scales."""
    rng = np.random.default_rng(7)
    parts = [rng.uniform(-1, 1, 200), rng.standard_normal(200), rng.standard_normal(100) * 100, rng.uniform(1, 3, 100)]
    with np.errstate(over="ignore"):
        x = np.concatenate(parts + [np.array(SPECIAL)]).astype(dtype)
    return x, rng.permutation(x)


def _outputs(x: lv.Tensor, y: lv.Tensor) -> dict:
    outs = {name: getattr(x, name)() for name in UNARY}
    outs["atan2"] = lv.atan2(x, y)
    outs["logaddexp"] = lv.logaddexp(x, y)
    outs["logaddexp2"] = lv.logaddexp2(x, y)
    outs["deg2rad"], outs["rad2deg"] = x.deg2rad(), x.rad2deg()
    return outs


def _numpy(x: np.ndarray, y: np.ndarray) -> dict:
    """NumPy's results, computed in float64 and rounded once."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        want = {name: fn(x64) for name, fn in UNARY.items()}
        want["atan2"] = np.arctan2(x64, y64)
        want["logaddexp"], want["logaddexp2"] = np.logaddexp(x64, y64), np.logaddexp2(x64, y64)
        want["deg2rad"], want["rad2deg"] = np.deg2rad(x64), np.rad2deg(x64)
        return {k: v.astype(x.dtype) for k, v in want.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_against_numpy(dtype, mode):
    x, y = _values(dtype)
    outs = _outputs(lv.tensor(x), lv.tensor(y))
    lv.sync(*outs.values())
    want = _numpy(x, y)
    for name, t in outs.items():
        got = t.numpy()
        if name in ("logaddexp", "logaddexp2", "deg2rad", "rad2deg"):
            # compositions: a few roundings, and max(x, y) + log1p(...) cancels where it is near 0
            eps = np.finfo(dtype).eps
            np.testing.assert_allclose(got, want[name], rtol=8 * eps, atol=8 * eps, err_msg=name)
        else:  # one libm call, within 2 ulp of NumPy's (float64, rounded once)
            _assert_same_values(got, want[name], name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpreted_and_compiled_give_the_same_bits(dtype, monkeypatch):
    x, y = _values(dtype)
    got = {}
    for mode in ("never", "always"):
        monkeypatch.setattr(config, "compile", mode)
        outs = _outputs(lv.tensor(x), lv.tensor(y))
        lv.sync(*outs.values())
        got[mode] = {name: t.numpy() for name, t in outs.items()}
    differ = [name for name in got["never"] if not same_bits(got["never"][name], got["always"][name])]
    assert not differ, f"interpreted and compiled bits differ for {differ}"


def test_edge_values(mode):
    x = lv.tensor([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, INF, -INF, NAN], dtype=lv.float64)
    outs = {
        "asin": (x.asin(), [0.0, -0.0, math.pi / 2, -math.pi / 2, NAN, NAN, NAN, NAN, NAN]),
        "acos": (x.acos(), [math.pi / 2, math.pi / 2, 0.0, math.pi, NAN, NAN, NAN, NAN, NAN]),
        "atan": (
            x.atan(),
            [0.0, -0.0, math.pi / 4, -math.pi / 4, math.atan(2), -math.atan(2), math.pi / 2, -math.pi / 2, NAN],
        ),
        "atanh": (x.atanh(), [0.0, -0.0, INF, -INF, NAN, NAN, NAN, NAN, NAN]),
        "acosh": (x.acosh(), [NAN, NAN, 0.0, NAN, math.acosh(2), NAN, INF, NAN, NAN]),
        "asinh": (x.asinh(), [0.0, -0.0, math.asinh(1), -math.asinh(1), math.asinh(2), -math.asinh(2), INF, -INF, NAN]),
        "sinh": ((x * 1000).sinh(), [0.0, -0.0, INF, -INF, INF, -INF, INF, -INF, NAN]),
        "cosh": ((x * 1000).cosh(), [1.0, 1.0, INF, INF, INF, INF, INF, INF, NAN]),
    }
    zeros, signs = (
        lv.tensor([0.0, -0.0, 0.0, -0.0], dtype=lv.float64),
        lv.tensor([0.0, 0.0, -0.0, -0.0], dtype=lv.float64),
    )
    outs["atan2_zeros"] = (lv.atan2(zeros, signs), [0.0, -0.0, math.pi, -math.pi])
    lv.sync(*(t for t, _ in outs.values()))
    for name, (t, want) in outs.items():
        want = np.array(want)
        np.testing.assert_array_equal(t.numpy(), want, err_msg=name)
        np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(want), err_msg=f"{name}: signs")


@pytest.mark.parametrize("fn", ["sinh", "cosh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hyperbolic_overflow_bounds_are_the_c_library_s(fn, dtype):
    """The kernels' guards (Python's math raises OverflowError where C's sinh/cosh give inf) change
    no value: below the bound the C function is finite, just above it infinite."""
    bound = np.array([_HYPERBOLIC_MAX[np.dtype(dtype).name]], dtype)
    above = np.nextafter(bound, dtype(INF))
    ufunc = getattr(libm, fn)
    with np.errstate(over="ignore"):
        assert np.isfinite(ufunc(bound)).all() and np.isinf(ufunc(above)).all()
        assert np.isfinite(ufunc(-bound)).all() and np.isinf(ufunc(-above)).all()
    got = getattr(lv.tensor(np.concatenate([bound, above, -above])), fn)().numpy()
    assert np.isfinite(got[0]) and np.isinf(got[1:]).all()


# ------------------------------------------------------------------ gradients, errors
@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda a, b: lv.logaddexp(a, b), [[0.3, -2.0, 5.0, 1.5], [0.3, 1.0, -5.0, 1.2]]),
        (lambda a, b: lv.logaddexp2(a, b), [[0.3, -2.0, 5.0, 1.5], [0.3, 1.0, -5.0, 1.2]]),
        (lambda a: a.deg2rad() + a.rad2deg(), [[0.3, -2.0, 5.0]]),
        (lambda a, b: a.atan2(b).sinh() + b.acosh(), [[0.3, -2.0, 0.5], [1.5, 1.2, 3.0]]),
    ],
    ids=["logaddexp", "logaddexp2", "degrees", "chain"],
)
def test_gradients_against_finite_differences(fn, arrays):
    check_vjp(fn, *(np.array(a) for a in arrays))


def test_logaddexp_gradients_at_infinities_are_pytorch_s():
    a = lv.tensor([INF, -INF, 2.0], dtype=lv.float64, requires_grad=True)
    b = lv.tensor([1.0, 0.0, -INF], dtype=lv.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lv.logaddexp(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, 1.0, 0.0])


def test_errors():
    x = lv.tensor([0.5, 0.25])
    with pytest.raises(errors.DTypeError, match="atan2: argument 'other' must be a Tensor, not float"):
        lv.atan2(x, 2.0)
    with pytest.raises(errors.DTypeError, match="logaddexp: expected floating-point operands, got int64 and int64"):
        lv.logaddexp(lv.tensor([1, 2]), lv.tensor([3, 4]))
    with pytest.raises(errors.DTypeError, match="logaddexp2: argument 'other' must be a Tensor"):
        x.logaddexp2(1.0)
    with pytest.raises(errors.ShapeError, match="atan2"):
        x.atan2(lv.ones(3))
