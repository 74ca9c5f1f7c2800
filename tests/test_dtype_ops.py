"""Every elementwise and reduction primitive in every dtype it accepts: compiled kernels and the
interpreter give the same bits, and the values match NumPy (ml_dtypes for bfloat16).

Half types compute in float32 and round each op's result (lazyvic/dtypes.py); integer ops wrap.
The compiled run is checked against the interpreter by the checking mode itself
(``config.check``: runtime/check.py compares every output bit for bit and raises CheckError).
"""

import ml_dtypes
import numpy as np
import pytest

import lazyvic as lv
from lazyvic import dtypes as dt
from lazyvic import ops as optable
from lazyvic.errors import DTypeError
from lazyvic.runtime import plan_cache
from lazyvic.runtime.config import config

SHAPE = (3, 37)  # one shape for every case: few kernels to compile; 37 > the 32 sum lanes
UNARY = sorted(n for n, o in optable.OPS.items() if o.kind == "elementwise" and o.arity == 1 and n != "cast")
BINARY = sorted(n for n, o in optable.OPS.items() if o.kind == "elementwise" and o.arity == 2)
REDUCE = ("sum", "max", "min", "prod", "argmax")


@pytest.fixture
def compiled(monkeypatch):
    """Compile every plan at first sight and check it against the interpreter, bit for bit."""
    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(config, "check", True)
    plan_cache.clear_plans()


def _values(d: dt.DType, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if d is dt.bool_:
        return rng.random(SHAPE) < 0.5
    if d.category == 1:
        info = np.iinfo(d.np)
        lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
        a = rng.integers(lo, hi, SHAPE, endpoint=True, dtype=np.int64 if d is not dt.uint64 else np.uint64)
        a.flat[:4] = [info.min, info.max, 0, 1] if d.signed else [0, info.max, 1, 2]
        return a.astype(d.np)
    a = (rng.standard_normal(SHAPE) * 3).astype(np.float32)
    a.flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5]
    return a.astype(np.float32).astype(d.np)


def _accepts(opname: str, d: dt.DType, arity: int) -> bool:
    try:
        optable.OPS[opname].infer((SHAPE,) * arity, (d,) * arity, {})
    except (DTypeError, KeyError):
        return False
    return True


def _numpy_reference(opname: str, arrays: list, d: dt.DType) -> np.ndarray:
    """What the op computes, in NumPy's own arithmetic (half types: in float32, rounded once)."""
    wide = [a.astype(np.float32) if d.is_half else a for a in arrays]
    f = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
        "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative, "abs": np.abs,
        "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal, "sqrt": np.sqrt, "floor": np.floor,
        "round": np.round, "logical_not": np.logical_not,
        "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    }.get(opname)  # fmt: skip
    if f is None:
        return None
    with np.errstate(all="ignore"):
        out = np.asarray(f(*wide))
    return out.astype(d.np) if out.dtype.kind == "f" and d.is_half else out


def _assert_matches_numpy(got: np.ndarray, want, opname: str, d: dt.DType) -> None:
    if want is None:
        return
    assert got.dtype == want.dtype, (opname, d)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=f"{opname} {d.name}")
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        assert np.array_equal(g, w, equal_nan=True), f"{opname} {d.name}: {g[g != w][:4]} vs {w[g != w][:4]}"


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.name)
def test_elementwise_ops_in_every_dtype(compiled, d):
    """Each unary and binary primitive that accepts ``d``: compiled == interpreted (bits), and the
    plain arithmetic, comparisons and rounding equal NumPy's (for the half types, NumPy in float32
    rounded once: what ml_dtypes' own bfloat16 arithmetic computes too)."""
    a, b = _values(d, 1), _values(d, 2)
    ran = 0
    for name in UNARY + BINARY:
        arity = optable.OPS[name].arity
        if not _accepts(name, d, arity):
            continue
        args = [lv.tensor(x, dtype=d) for x in (a, b)[:arity]]
        got = lv.Tensor.apply(name, *args).numpy()  # compiled, checked against the interpreter
        _assert_matches_numpy(got, _numpy_reference(name, [a, b][:arity], d), name, d)
        ran += 1
    assert ran >= (6 if d is dt.bool_ else 12)


def test_bfloat16_arithmetic_equals_ml_dtypes():
    """ml_dtypes' bfloat16 ufuncs compute in float32 and round: lazyvic's half arithmetic is the same."""
    a, b = _values(dt.bfloat16, 3), _values(dt.bfloat16, 4)
    x, y = lv.tensor(a), lv.tensor(b)
    assert x.dtype is lv.bfloat16
    with np.errstate(all="ignore"):
        for got, want in ((x + y, a + b), (x * y, a * b), (x - y, a - b), (x / y, a / b), (x > y, a > b)):
            assert np.array_equal(got.numpy().astype(np.float64), want.astype(np.float64), equal_nan=True)
    assert a.dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.name)
def test_casts_between_every_pair_of_dtypes(compiled, d):
    """x.to(e) for every target: compiled == interpreted; the values are NumPy's casts (float to a
    narrow integer through int64, as PyTorch on x86; to a half type through float32)."""
    a = _values(d, 5)
    if d.category == 2:
        a = np.nan_to_num(a.astype(np.float32), nan=1.5, posinf=100.25, neginf=-7.75).astype(d.np)
    for e in dt.ALL:
        got = lv.tensor(a, dtype=d).to(e).numpy()
        src = a.astype(np.float32) if d.is_half else a
        with np.errstate(over="ignore"):  # int32 -> float16 overflows to inf, as in PyTorch
            if e.is_half:
                want = src.astype(np.float32).astype(e.np)
            elif src.dtype.kind == "f" and e is dt.uint64:
                want = np.where(src >= 0, src.astype(np.uint64), src.astype(np.int64).astype(np.uint64))
            elif src.dtype.kind == "f" and e.category == 1:
                want = src.astype(np.int64).astype(e.np)
            else:
                want = src.astype(e.np)
        assert got.dtype == want.dtype
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True), (d.name, e.name)


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.name)
def test_reductions_in_every_dtype(compiled, d):
    """Row and full reductions: compiled == interpreted; integer sums are exact int64 (PyTorch's
    sum of an integer tensor is int64), max/min/argmax equal NumPy's."""
    a = _values(d, 6)
    if d.category == 2:
        a = np.nan_to_num(a.astype(np.float32), nan=0.25, posinf=9.0, neginf=-9.0).astype(d.np)
    x = lv.tensor(a, dtype=d)
    for dim in (None, 1):
        if d is not dt.bool_:
            mx = x.max() if dim is None else x.max(dim).values
            np.testing.assert_array_equal(mx.numpy(), a.max() if dim is None else a.max(1))
            am = x.argmax() if dim is None else x.argmax(dim)
            np.testing.assert_array_equal(am.numpy(), a.argmax() if dim is None else a.argmax(1))
        s = (x.sum() if dim is None else x.sum(dim)).numpy()
        if d.category < 2:
            assert s.dtype == np.int64
            want = a.astype(np.int64).sum() if dim is None else a.astype(np.int64).sum(1)
            np.testing.assert_array_equal(s, want)  # uint64: both wrap modulo 2**64
        else:
            assert s.dtype == d.np
            want = a.astype(np.float64).sum() if dim is None else a.astype(np.float64).sum(1)
            np.testing.assert_allclose(s.astype(np.float64), want, rtol=2e-2 if d.is_half else 1e-5, atol=1e-3)


def test_half_chain_rounds_every_op():
    """(x * y + 1) in float16 rounds x * y before adding (each op's result is a float16 value), as
    PyTorch's eager ops do; a fused float32 chain rounding once would give another value."""
    x = lv.tensor([1.86328125], dtype=lv.float16)
    y = lv.tensor([1.7958984375], dtype=lv.float16)
    for _ in range(3):  # interpreted, then compiled: the same bits
        got = (x * y + 1.0).numpy()
        assert got.dtype == np.float16 and got[0] == np.float16(4.34375)
    once = (np.float32(1.86328125) * np.float32(1.7958984375) + np.float32(1.0)).astype(np.float16)
    assert once == np.float16(4.34765625)


@pytest.mark.parametrize("mode", ["never", "always"])
def test_integer_pow_stays_integer(monkeypatch, mode):
    """int ** int tensors as PyTorch 2.13 computes them (values printed by torch): square and
    multiply with wraparound, and 0 for negative exponents except bases 1 and -1."""
    monkeypatch.setattr(config, "compile", mode)
    a, b = lv.tensor([2, -3, 1, -1, 0, 7, 2]), lv.tensor([3, 2, -5, -3, 0, 30, 70])
    got = a**b
    assert got.dtype is lv.int64
    np.testing.assert_array_equal(got.numpy(), [8, 9, 1, -1, 1, 1576789505350337489, 0])
    got8 = a.to(lv.int8) ** b.to(lv.int8)
    assert got8.dtype is lv.int8
    np.testing.assert_array_equal(got8.numpy(), [8, 9, 1, -1, 1, -47, 0])
    with pytest.raises(DTypeError, match="pow: bool"):
        lv.tensor([True]) ** lv.tensor([True])


@pytest.mark.parametrize("d", [d for d in dt.ALL if d.category == 1], ids=lambda d: d.name)
def test_integer_bitwise_ops(compiled, d):
    """&, |, ^ and ~ on integer tensors: NumPy's two's complement results, compiled == interpreted;
    a Python int operand wraps into the dtype, a float operand is refused (as PyTorch)."""
    a, b = _values(d, 7), _values(d, 8)
    x, y = lv.tensor(a), lv.tensor(b)
    np.testing.assert_array_equal((x & y).numpy(), a & b)
    np.testing.assert_array_equal((x | y).numpy(), a | b)
    np.testing.assert_array_equal((x ^ y).numpy(), a ^ b)
    np.testing.assert_array_equal((~x).numpy(), ~a)
    np.testing.assert_array_equal((x & 6).numpy(), a & d.np.type(6))
    with pytest.raises(lv.errors.UnsupportedOpError, match="&: bitwise operations on float32"):
        x.to(lv.float32) & x.to(lv.float32)
