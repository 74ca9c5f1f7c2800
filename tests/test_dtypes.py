"""The storage dtypes against PyTorch: promotion, bit-exact casts, half-precision arithmetic,
integer wraparound, the compiled path's bits, creation and its errors.

The answers come from real PyTorch (``tests/fixtures/torch_dtypes/``, made by
``tests/fixtures/make_dtype_fixtures.py`` with PyTorch 2.13 on the CPU; see its README.md): the
tests need no torch. float16 / bfloat16 arrays are stored there as their uint16 bits (keys
ending in ``__bits``). The ``.pt`` checkpoints of that folder are tested in
``tests/interop/test_torch_checkpoint.py``.

Where lazyvic disagrees with PyTorch the case is an ``xfail(strict=True)`` naming the
difference: the table here is the list of known differences, and fixing one turns its xfail
into a failure to remove.

Speed: the value tests run on the interpreter (``interpreted``); the compiled path is checked
once per group of ops (``test_compiled_runs_give_the_same_bits``: one plan per group), so few
kernels are compiled.
"""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError, LazyvicError
from lazyvic.runtime import metrics
from lazyvic.runtime.check import same_bits
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import plan_cache

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "torch_dtypes"
PROMOTION = json.loads((FIXTURES / "promotion.json").read_text())
META = json.loads((FIXTURES / "values_meta.json").read_text())["arrays"]
REFUSED = json.loads((FIXTURES / "unsupported_uint_ops.json").read_text())["refused"]
NAMES = PROMOTION["dtypes"]
WIDE_UNSIGNED = ("uint16", "uint32", "uint64")
HALF_NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _load_values() -> dict:
    """values.npz by key without the ``__bits`` suffix; halves viewed as their own dtype."""
    out = {}
    with np.load(FIXTURES / "values.npz") as npz:
        for key in npz.files:
            a = npz[key]
            if META[key]["encoding"] == "bits":
                key, a = key.removesuffix("__bits"), a.view(HALF_NP[META[key]["dtype"]])
            out[key] = a
    return out


V = _load_values()
D = dt.get_dtype


def xfail(*values, reason: str):
    return pytest.param(*values, marks=pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture
def interpreted(monkeypatch):
    """The interpreter only: the value tests compile nothing (the compiled path is
    test_compiled_runs_give_the_same_bits's)."""
    monkeypatch.setattr(config, "compile", "never")


# ------------------------------------------------------------------------------ comparisons
def _words(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _isnan(a: np.ndarray) -> np.ndarray:
    if a.dtype in HALF_NP.values() or a.dtype.kind == "f":
        return np.isnan(a.astype(np.float32 if a.dtype.itemsize <= 4 else np.float64))
    return np.zeros(a.shape, bool)


def assert_bits(got, want, what: str = "") -> None:
    """Same dtype, shape and bits; any NaN equals any NaN (PyTorch's bfloat16 NaN payloads
    differ between its vectorized and scalar paths). Not ``runtime.check.same_bits``: that
    one is not NaN-aware for bfloat16 (see test_same_bits_is_nan_aware_for_bfloat16)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, PyTorch {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, PyTorch {want.shape}"
    differ = (_words(got) != _words(want)) & ~(_isnan(got) & _isnan(want))
    if differ.any():
        k = np.flatnonzero(differ)[:4]
        g, w = got.reshape(-1)[k], want.reshape(-1)[k]
        raise AssertionError(f"{what}: {differ.sum()} of {differ.size} differ, at {k}: got {g}, PyTorch {w}")


def half_ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element, how many representable values of the half type lie between got and want
    (0 for two NaNs; the sign-magnitude bits mapped to a monotonic integer line)."""

    def line(a):
        u = a.view(np.uint16).astype(np.int64)
        return np.where(u & 0x8000, 0x8000 - u, u)

    return np.where(_isnan(got) & _isnan(want), 0, np.abs(line(got) - line(want)))


# ------------------------------------------------------------------------------ 1. promotion
def _is_error(want: str) -> bool:
    return want.startswith("error: ")


def _missing_kernel(want: str) -> bool:
    """PyTorch raised because its CPU build has no kernel for the dtype ("add_stub" not
    implemented for 'UInt16'): a gap in its coverage, not a typing rule."""
    return _is_error(want) and "not implemented for" in want


def expect(fn, want: str, implied: str) -> None:
    """``fn()`` has PyTorch's dtype ``want`` (and ``.numpy()`` gives it), or raises a lazyvic
    error where PyTorch raises. Where PyTorch only lacks the kernel, lazyvic may compute the op;
    it must then give ``implied``, the dtype PyTorch's promotion gives the op."""
    if not _is_error(want):
        r = fn()
        assert r.dtype.name == want
        assert r.numpy().dtype == D(want).np
        return
    if _missing_kernel(want):
        try:
            r = fn()
        except LazyvicError:
            return
        assert r.dtype.name == implied, f"PyTorch has no kernel; lazyvic computes it as {r.dtype.name}"
        return
    with pytest.raises(LazyvicError):
        fn().numpy()


@pytest.mark.parametrize("a, b", [(a, b) for a in NAMES for b in NAMES])
def test_promote_types(a, b):
    want = PROMOTION["tensor_tensor"][a][b]
    if _is_error(want):
        with pytest.raises(DTypeError):
            dt.promote(D(a), D(b))
    else:
        assert dt.promote(D(a), D(b)) is D(want)


SCALARS = {"True": True, "2": 2, "2.5": 2.5}
SCALAR_OPS = {"add": lambda x, s: x + s, "mul": lambda x, s: x * s, "truediv": lambda x, s: x / s}


@pytest.mark.parametrize("s", list(SCALARS))
@pytest.mark.parametrize("d", NAMES)
@pytest.mark.parametrize("op", list(SCALAR_OPS))
def test_tensor_scalar_promotion(interpreted, op, d, s):
    want = PROMOTION["tensor_scalar"][op][d][s]
    expect(lambda: SCALAR_OPS[op](lv.ones(3, dtype=D(d)), SCALARS[s]), want, implied=d)


@pytest.mark.parametrize("a, b", [(a, b) for a in NAMES for b in NAMES])
def test_zero_dim_tensor_promotion(interpreted, a, b):
    want = PROMOTION["zero_dim"][a][b]
    expect(lambda: lv.ones(3, dtype=D(a)) + lv.ones((), dtype=D(b)), want, implied=a)


OPS = {
    "truediv": lambda x: x / x,
    "floordiv": lambda x: x // x,
    "remainder": lambda x: x % x,
    "neg": lambda x: -x,
    "abs": lambda x: x.abs(),
    "sum": lambda x: x.sum(),
    "prod": lambda x: x.prod(),
    "mean": lambda x: x.mean(),
    "cumsum": lambda x: x.cumsum(0),
    "exp": lambda x: x.exp(),
    "sqrt": lambda x: x.sqrt(),
    "matmul": lambda x: lv.ones(3, 3, dtype=x.dtype) @ lv.ones(3, 3, dtype=x.dtype),
    "maximum": lambda x: lv.maximum(x, x),
    "pow_int": lambda x: x**2,
    "pow_tensor": lambda x: x**x,
    "argmax": lambda x: x.argmax(),
    "float": lambda x: x.float(),
}


@pytest.mark.parametrize("d, op", [(d, op) for d in NAMES for op in OPS])
def test_op_result_dtype(interpreted, d, op):
    implied = "int64" if op == "argmax" else d  # what the op gives where only PyTorch's kernel is missing
    expect(lambda: OPS[op](lv.ones(3, dtype=D(d))), PROMOTION["ops"][d][op], implied)


def test_every_fixture_op_is_tested():
    assert set(OPS) == {op for ops in PROMOTION["ops"].values() for op in ops}
    assert set(SCALAR_OPS) == set(PROMOTION["tensor_scalar"])


# ------------------------------------------------------------------------------ 2. casts
# (fixture key of the result, key of the source, target dtype)
CASTS = [
    ("cast_f32_to_f16", "cast_src_f32", "float16"),
    ("cast_f32_to_bf16", "cast_src_f32", "bfloat16"),
    ("cast_f64_to_f16", "cast_src_f64", "float16"),
    ("cast_f64_to_bf16", "cast_src_f64", "bfloat16"),
    ("cast_f64_to_f32", "cast_src_f64", "float32"),
    ("cast_f16_to_bf16", "cast_src_f16", "bfloat16"),
    ("cast_bf16_to_f16", "cast_src_bf16", "float16"),
    ("cast_f32_to_bool", "cast_src_f32", "bool"),
    *[(f"cast_f32_to_{t}", f"cast_f32_int_src_{t}", t) for t in ("uint8", "int8", "int16", "int32")],
    *[(f"cast_{h}_to_int16", f"cast_{h}_int_src", "int16") for h in ("float16", "bfloat16")],
    *[
        (f"cast_int64_to_{t}", "cast_src_int64", t)
        for t in ("bool", "uint8", "int8", "int16", "int32", "uint16", "uint32", "uint64", "float16", "bfloat16")
    ],
]


def test_every_cast_group_is_tested():
    assert {key for key, _, _ in CASTS} | {src for _, src, _ in CASTS} == {k for k in V if k.startswith("cast_")}


@pytest.mark.parametrize("key, src, target", CASTS, ids=[c[0] for c in CASTS])
def test_cast_bits(interpreted, key, src, target):
    """Round to nearest even at every boundary (half overflow, subnormals, ties, float64 values
    that round differently through float32), integers wrap, float -> int truncates."""
    x = lv.tensor(V[src])
    assert x.dtype is D(str(V[src].dtype))
    assert_bits(x.to(D(target)).numpy(), V[key], key)


CAST_METHODS = {"half": "float16", "bfloat16": "bfloat16", "byte": "uint8", "char": "int8", "short": "int16"}


@pytest.mark.parametrize("method", list(CAST_METHODS))
def test_cast_methods(interpreted, method):
    target = CAST_METHODS[method]
    got = getattr(lv.tensor(V["cast_src_int64"]), method)()
    assert got.dtype is D(target)
    assert_bits(got.numpy(), V[f"cast_int64_to_{target}"], method)


def test_dtype_aliases():
    assert lv.half is lv.float16 and lv.short is lv.int16
    assert lv.tensor([1.0]).to("float16").dtype is lv.float16


# ------------------------------------------------------------------------------ 3. half arithmetic
HALF_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "exp": lambda a, b: a.exp(),
    "tanh": lambda a, b: a.tanh(),
    "sigmoid": lambda a, b: a.sigmoid(),
    "sqrt_abs": lambda a, b: a.abs().sqrt(),
    "gelu": lambda a, b: F.gelu(a),
    "gelu_tanh": lambda a, b: F.gelu(a, approximate="tanh"),
    "sum": lambda a, b: a.sum(),
    "sum_rows": lambda a, b: a.reshape(10, 100).sum(1),
    "mean": lambda a, b: a.mean(),
    "softmax": lambda a, b: a.reshape(10, 100).softmax(1),
    "matmul": lambda a, b: a.reshape(10, 100) @ b.reshape(100, 10),
    "mul_scalar_1_1": lambda a, b: a * 1.1,
    "add_scalar_3": lambda a, b: a + 3,
    "cumsum": lambda a, b: a.cumsum(0),
}
# One float32 op, rounded once, as PyTorch's CPU kernels: the same bits.
HALF_EXACT = ("add", "sub", "mul", "div", "sqrt_abs", "mul_scalar_1_1", "add_scalar_3")
# lazyvic's own float32 approximations (2-3 float32 ulps, ops/numerics.py) or another float32
# summation order: the float32 values differ by far less than one half ulp (2**13 float32 ulps
# for float16, 2**16 for bfloat16), so after rounding they can land on the neighbouring half
# value only when the exact result is near a rounding boundary: at most 1 half ulp. (All of
# these were bit-exact on the fixture's data when written, softmax/cumsum/gelu aside.)
HALF_ONE_ULP = ("exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "sum", "sum_rows", "mean", "softmax", "matmul", "cumsum")
# gelu's left tail: both libraries compute x/2 * (1 + erf(x / sqrt 2)) in float32, where 1 + erf
# cancels (its absolute error, a few float32 ulps of 1, is all that is left below x ~ -3): the
# results there agree to that absolute error times |x|, not to a half ulp of a tiny value.
GELU_TAIL_ABS = 2e-6
HALF_DIFFER: dict = {}  # op -> why lazyvic differs from PyTorch (none known)


def _half_params():
    for h in HALF_NP:
        for op in HALF_OPS:
            yield xfail(h, op, reason=HALF_DIFFER[op]) if op in HALF_DIFFER else pytest.param(h, op)


def _half_results(h: str) -> dict:
    a, b = lv.tensor(V[f"{h}_a"]), lv.tensor(V[f"{h}_b"])
    return {op: f(a, b) for op, f in HALF_OPS.items()}


@pytest.mark.parametrize("h, op", list(_half_params()))
def test_half_arithmetic(interpreted, h, op):
    a, b = lv.tensor(V[f"{h}_a"]), lv.tensor(V[f"{h}_b"])
    assert a.dtype is D(h)
    got, want = HALF_OPS[op](a, b), V[f"{h}_{op}"]
    assert got.dtype is D(h)
    got = got.numpy()
    if op in HALF_EXACT:
        assert_bits(got, want, f"{h} {op}")
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float32), want.astype(np.float32)
    assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(
        np.where(np.isinf(g), g, 0), np.where(np.isinf(w), w, 0)
    )
    ulps = half_ulps(got, want)
    if op.startswith("gelu"):
        tail = np.abs(g - w) <= GELU_TAIL_ABS * np.abs(V[f"{h}_a"].astype(np.float32))
        ulps = np.where(tail, 0, ulps)
    assert ulps.max() <= 1, f"{h} {op}: {(ulps > 1).sum()} elements more than 1 ulp off, up to {ulps.max()}"


def test_every_half_op_is_tested():
    for h in HALF_NP:
        assert {k.removeprefix(f"{h}_") for k in V if k.startswith(f"{h}_")} == {"a", "b", *HALF_OPS}
    assert set(HALF_EXACT) | set(HALF_ONE_ULP) == set(HALF_OPS)


HALF_DIVISION_REASON = (
    "// floors the quotient already rounded to the operand type and % is x - (x // y) * y, each step rounded: "
    "float16 535.5 // 0.3708 gives 1444 (exact, NumPy and PyTorch: 1443), 125.75 % 0.251 gives 0.0 (0.01074); "
    "float32 125.75 % 0.251 gives 0.25000763 (0.25000644: PyTorch and NumPy use fmod, exact)"
)


@pytest.mark.xfail(strict=True, reason=HALF_DIVISION_REASON)
@pytest.mark.parametrize("npd", [np.float16, np.float32], ids=["float16", "float32"])
def test_floor_division_and_remainder_are_exact(interpreted, npd):
    """PyTorch's CPU // and % (c10::div_floor_floating, fmod-based; in float32 for float16) give
    what NumPy's do (npy_divmod, the same algorithm): the floored quotient of the exact
    quotient and the exact remainder, rounded once. Inputs: the fixture's float16 a, b."""
    a, b = V["float16_a"].astype(npd), V["float16_b"].astype(npd)
    x, y = lv.tensor(a), lv.tensor(b)
    with np.errstate(all="ignore"):
        assert_bits((x // y).numpy(), np.floor_divide(a, b), "//")
        assert_bits((x % y).numpy(), np.remainder(a, b), "%")


# ------------------------------------------------------------------------------ 4. integers
def _nonzero(y):
    return lv.where(y == 0, lv.ones_like(y), y)


INT_OPS = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "floordiv": lambda x, y: x // y.clamp(min=1),
    "remainder": lambda x, y: x % y.clamp(min=1),
    "neg": lambda x, y: -x,
    "abs": lambda x, y: x.abs(),
    "sum": lambda x, y: x.sum(),
    "gt": lambda x, y: x > y,
    "add_scalar_300": lambda x, y: x + 300,
    "mul_scalar_3": lambda x, y: x * 3,
    "floordiv_signed": lambda x, y: x // _nonzero(y),
    "remainder_signed": lambda x, y: x % _nonzero(y),
    "fmod_signed": lambda x, y: lv.fmod(x, _nonzero(y)),
    "min_by_neg1": lambda x, y: (
        lv.tensor([lv.iinfo(x.dtype).min] * 2 + [-7, 7], dtype=x.dtype) // lv.tensor([-1, 1, 2, -2], dtype=x.dtype)
    ),
}
WIDE_OPS = {
    "mul": lambda x, y: x * y,
    "truediv": lambda x, y: x / y,
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "sort": lambda x, y: x.sort().values,
    "sum": lambda x, y: x.sum(),
    "prod": lambda x, y: x[1:6].prod(),
    "cumsum": lambda x, y: x.cumsum(0),
    "bitwise_and": lambda x, y: x & y,
    "bitwise_or": lambda x, y: x | y,
    "bitwise_xor": lambda x, y: x ^ y,
    "mul_scalar_2": lambda x, y: x * 2,
    "mul_scalar_2_5": lambda x, y: x * 2.5,
    "where": lambda x, y: lv.where(x == y, x, y),
    "to_int64": lambda x, y: x.to(lv.int64),
    "to_float32": lambda x, y: x.to(lv.float32),
    "to_float64": lambda x, y: x.to(lv.float64),
    "to_float16": lambda x, y: x.to(lv.float16),
    "to_bfloat16": lambda x, y: x.to(lv.bfloat16),
}


def _ops_of(d: str) -> list:
    return [k.removeprefix(f"{d}_") for k in V if k.startswith(f"{d}_") and k not in (f"{d}_x", f"{d}_y")]


def _int_params():
    for d in ("uint8", "int8", "int16"):
        for op in _ops_of(d):
            yield pytest.param(d, op)
    for d in WIDE_UNSIGNED:
        for op in _ops_of(d):
            if op not in ("from_float64_src", "from_float64"):
                yield pytest.param(d, op)


def _int_results(d: str, ops: list) -> dict:
    x, y = lv.tensor(V[f"{d}_x"]), lv.tensor(V[f"{d}_y"])
    table = INT_OPS if d in ("uint8", "int8", "int16") else WIDE_OPS
    return {op: table[op](x, y) for op in ops}


@pytest.mark.parametrize("d, op", list(_int_params()))
def test_integer_ops(interpreted, d, op):
    """Wraparound modulo 2**bits (a Python int operand wraps too: int8 + 300 adds 44), floor
    division and remainder with the divisor's sign, sums as int64; uint16/32/64: the ops PyTorch
    runs on them."""
    assert lv.tensor(V[f"{d}_x"]).dtype is D(d)
    (got,) = _int_results(d, [op]).values()
    assert_bits(got.numpy(), V[f"{d}_{op}"], f"{d} {op}")


@pytest.mark.parametrize("d", WIDE_UNSIGNED)
def test_wide_unsigned_from_float64(interpreted, d):
    """In-range float64 -> uint16/32/64 truncates (2.7 -> 2), up to the largest float64 below 2**bits."""
    assert_bits(lv.tensor(V[f"{d}_from_float64_src"]).to(D(d)).numpy(), V[f"{d}_from_float64"], d)


def test_python_int_operand_wraps_into_the_dtype(interpreted):
    got = (lv.tensor([1, 2], dtype=lv.int8) + 1000).numpy()  # 1000 wraps to -24 in int8
    assert_bits(got, np.array([-23, -22], np.int8))


# The ops PyTorch 2.13 refuses on uint16/32/64 (unsupported_uint_ops.json): lazyvic may refuse
# them too (a lazyvic error, or Python's TypeError for an operator the Tensor lacks) or give
# NumPy's answer (which wraps modulo 2**bits as PyTorch's integer ops do).
REFUSED_OPS = {
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "sub": (lambda x, y: x - y, lambda x, y: x - y),
    "floordiv": (lambda x, y: x // y, lambda x, y: x // y),
    "remainder": (lambda x, y: x % y, lambda x, y: x % y),
    "neg": (lambda x, y: -x, lambda x, y: -x),
    "abs": (lambda x, y: x.abs(), lambda x, y: x),
    "lt": (lambda x, y: x < y, lambda x, y: x < y),
    "gt": (lambda x, y: x > y, lambda x, y: x > y),
    "maximum": (lambda x, y: lv.maximum(x, y), np.maximum),
    "minimum": (lambda x, y: lv.minimum(x, y), np.minimum),
    "max": (lambda x, y: x.max(), lambda x, y: x.max()),
    "min": (lambda x, y: x.min(), lambda x, y: x.min()),
    "argmax": (lambda x, y: x.argmax(), lambda x, y: np.int64(x.argmax())),
    "mean": (lambda x, y: x.mean(), None),  # no integer mean: PyTorch's rule, not a missing kernel
    "bitwise_not": (lambda x, y: ~x, lambda x, y: ~x),
    "lshift_3": (lambda x, y: x << 3, lambda x, y: x << x.dtype.type(3)),
    "rshift_3": (lambda x, y: x >> 3, lambda x, y: x >> x.dtype.type(3)),
    "add_scalar_1": (lambda x, y: x + 1, lambda x, y: x + x.dtype.type(1)),
    "matmul": (
        lambda x, y: x[:4].reshape(2, 2) @ y[:4].reshape(2, 2),
        lambda x, y: x[:4].reshape(2, 2) @ y[:4].reshape(2, 2),
    ),
    "clamp": (lambda x, y: x.clamp(1, 1000), lambda x, y: np.clip(x, x.dtype.type(1), x.dtype.type(1000))),
}


def _refused_params():
    for d, ops in REFUSED.items():
        for op in ops:
            yield pytest.param(d, op)


@pytest.mark.parametrize("d, op", list(_refused_params()))
def test_ops_pytorch_refuses_on_wide_unsigned(interpreted, d, op):
    xn, yn = V[f"{d}_x"], V[f"{d}_y"]
    f, reference = REFUSED_OPS[op]
    try:
        got = f(lv.tensor(xn), lv.tensor(yn)).numpy()
    except (LazyvicError, TypeError):
        return
    assert reference is not None, f"PyTorch refuses {op} on {d} by rule, lazyvic computes it"
    with np.errstate(all="ignore"):
        assert_bits(got, np.asarray(reference(xn, yn)), f"{d} {op}")


@pytest.mark.parametrize("mode", ["never", "always"])
def test_wide_integer_floor_division_is_exact(monkeypatch, mode):
    monkeypatch.setattr(config, "compile", mode)
    a = np.array([2**62 + 1, -(2**62) - 1, 2**53 + 1, 7], np.int64)
    b = np.array([3, 3, 2, -2], np.int64)
    x, y = lv.tensor(a), lv.tensor(b)
    assert_bits((x // y).numpy(), a // b, "//")  # got 1537228672809129216, exact 1537228672809129301
    assert_bits((x % y).numpy(), a % b, "%")


# ------------------------------------------------------------------------------ 5. compiled path
def _cast_results() -> dict:
    return {key: lv.tensor(V[src]).to(D(target)) for key, src, target in CASTS}


GROUPS = {
    "float16": lambda: _half_results("float16"),
    "bfloat16": lambda: _half_results("bfloat16"),
    **{d: (lambda d=d: _int_results(d, _ops_of(d))) for d in ("uint8", "int8", "int16")},
    **{d: (lambda d=d: _int_results(d, [op for op in _ops_of(d) if op in WIDE_OPS])) for d in WIDE_UNSIGNED},
    "casts": _cast_results,
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_compiled_runs_give_the_same_bits(fresh, group):
    """Each group's ops realized together three times in the default mode (hot: the first run
    interprets, the second compiles the plan, the third reruns it): the same bits every time,
    with no op falling back to the interpreter (a kernel that fails to compile would; a whole
    plan that fails shows as ``<whole trace: ...>``)."""
    runs = []
    for _ in range(3):
        results = GROUPS[group]()
        runs.append({op: t.numpy() for op, t in results.items()})
    snap = metrics.snapshot()
    assert snap["interpreted_runs"] >= 1 and snap["compiled_runs"] >= 2, snap
    # argsort (sort) runs on the host in every dtype, float32 included: the one planned fallback
    assert set(snap["fallback_ops"]) <= {"argsort"}, snap["fallback_ops"]
    differ = []
    for op in runs[0]:
        for run in runs[1:]:
            try:
                assert_bits(run[op], runs[0][op], op)
            except AssertionError as e:
                differ.append(str(e))
    assert not differ, differ


@pytest.fixture
def checking(monkeypatch):
    """LAZYVIC_CHECK=1 at run time: every plan compiled at once, each compiled run compared with
    the interpreter bit for bit (runtime/check.py raises CheckError on a difference)."""
    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(config, "check", True)
    plan_cache.clear_plans()
    metrics.reset()


def _round_each(h: str):
    return lambda v: v.astype(HALF_NP[h]).astype(np.float32)


@pytest.mark.parametrize("h", list(HALF_NP))
def test_half_chain_under_check_mode(checking, h):
    """A chain of half ops compiled and checked against the interpreter; its value is NumPy's
    with every op computed in float32 and rounded to the half type."""
    an, bn = V[f"{h}_a"], V[f"{h}_b"]
    a, b = lv.tensor(an), lv.tensor(bn)
    chain = (a * b + 3) / (a.abs().sqrt() + 1) - b
    total = chain.reshape(10, 100).exp().sum(1)
    got = chain.numpy()
    total.numpy()
    assert metrics.snapshot()["checked_runs"] >= 1
    r, A, B = _round_each(h), an.astype(np.float32), bn.astype(np.float32)
    want = r(r(r(r(A * B) + 3) / r(r(np.sqrt(np.abs(A))) + 1)) - B)
    assert_bits(got, want.astype(HALF_NP[h]), h)


def test_uint8_chain_under_check_mode(checking):
    xn, yn = V["uint8_x"], V["uint8_y"]
    x, y = lv.tensor(xn), lv.tensor(yn)
    chain = ((x * 3 + y) // y.clamp(min=1) - x) % 7
    total = chain.sum()
    got, got_total = chain.numpy(), total.numpy()
    assert metrics.snapshot()["checked_runs"] >= 1
    u = np.uint8
    want = ((xn * u(3) + yn) // np.maximum(yn, u(1)) - xn) % u(7)
    assert_bits(got, want, "chain")
    assert_bits(got_total, np.int64(want.astype(np.int64).sum()), "sum")


def test_same_bits_is_nan_aware_for_bfloat16():
    a = np.array([0x7FC0, 0x3F80], np.uint16).view(ml_dtypes.bfloat16)
    b = np.array([0x7FC1, 0x3F80], np.uint16).view(ml_dtypes.bfloat16)
    assert same_bits(a.view(np.uint16).view(np.float16), b.view(np.uint16).view(np.float16))  # float16: NaN-aware
    assert same_bits(a, b)


# ------------------------------------------------------------------------------ 6. creation
@pytest.mark.parametrize(
    "value, d",
    [
        (300, "uint8"),
        (-1, "uint8"),
        (128, "int8"),
        (-32769, "int16"),
        (65536, "uint16"),
        (2**32, "uint32"),
        (2**64, "uint64"),
        (-1, "uint64"),
    ],
)
def test_creation_out_of_range_raises(value, d):
    with pytest.raises(DTypeError) as err:
        lv.tensor([value], dtype=D(d))
    assert str(value) in str(err.value) and d in str(err.value)
    with pytest.raises(DTypeError) as err:
        lv.full((2,), value, dtype=D(d))
    assert str(value) in str(err.value) and d in str(err.value)


def test_uint64_round_trips_exactly():
    t = lv.tensor([2**64 - 1, 2**63, 2**53 + 1, 0], dtype=lv.uint64)
    a = t.numpy()
    assert a.dtype == np.uint64 and [int(v) for v in a] == [2**64 - 1, 2**63, 2**53 + 1, 0]
    assert t[0].item() == 2**64 - 1 and t[2].item() == 2**53 + 1


@pytest.mark.parametrize("h", list(HALF_NP))
def test_half_numpy_arrays_keep_their_dtype_and_bits(h):
    src = V[f"cast_src_{'f16' if h == 'float16' else 'bf16'}"]  # every bit pattern class, NaN payloads included
    t = lv.tensor(src)
    assert t.dtype is D(h)
    out = t.numpy()
    assert out.dtype == HALF_NP[h]
    np.testing.assert_array_equal(out.view(np.uint16), src.view(np.uint16))
    assert lv.tensor(np.array([1.5], HALF_NP[h])).dtype is D(h)


ITEMS = [
    ("bool", True),
    ("uint8", 255),
    ("int8", -128),
    ("int16", -32768),
    ("int32", -(2**31)),
    ("int64", -(2**63)),
    ("uint16", 65535),
    ("uint32", 2**32 - 1),
    ("uint64", 2**64 - 1),
    ("float16", 0.0999755859375),  # float16(0.1)
    ("bfloat16", 0.10009765625),  # bfloat16(0.1)
    ("float32", 0.10000000149011612),  # float32(0.1)
    ("float64", 0.1),
]


@pytest.mark.parametrize("d, value", ITEMS, ids=[i[0] for i in ITEMS])
def test_item_gives_the_python_value(interpreted, d, value):
    src = 0.1 if D(d).is_floating_point else value
    got = lv.tensor([src], dtype=D(d))[0].item()
    assert type(got) is type(value) and got == value


def test_finfo_and_iinfo():
    assert lv.finfo(lv.float16).max == 65504 and lv.finfo(lv.float16).eps == 2.0**-10
    assert lv.finfo(lv.float16).tiny == 2.0**-14 and lv.finfo(lv.float16).bits == 16
    assert lv.finfo(lv.bfloat16).max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert lv.finfo(lv.bfloat16).eps == 2.0**-7 and lv.finfo(lv.bfloat16).tiny == 2.0**-126
    assert lv.iinfo(lv.uint8).max == 255 and lv.iinfo(lv.uint8).min == 0
    assert lv.iinfo(lv.int8).min == -128 and lv.iinfo(lv.int16).max == 32767
    assert lv.iinfo(lv.uint64).max == 2**64 - 1 and lv.iinfo(lv.uint32).bits == 32
    with pytest.raises(DTypeError):
        lv.finfo(lv.uint8)
    with pytest.raises(DTypeError):
        lv.iinfo(lv.float16)
