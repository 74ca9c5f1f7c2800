"""``lazyvic.testing.assert_close``: PyTorch's ``torch.testing.assert_close`` for lazyvic tensors
(with its default tolerances per dtype and its messages), so test suites written for PyTorch run
with ``import lazyvic as torch``. Comparing reads the values (a sync point).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.tensor import Tensor

# (rtol, atol) by dtype: PyTorch's defaults (torch/testing/_comparison.py)
_TOLERANCES = {
    dt.float16: (1e-3, 1e-5),
    dt.bfloat16: (1.6e-2, 1e-5),
    dt.float32: (1.3e-6, 1e-5),
    dt.float64: (1e-7, 1e-7),
}


def _tolerances(d: dt.DType, rtol, atol) -> tuple:
    if rtol is not None:
        return rtol, atol
    return _TOLERANCES.get(d, (0.0, 0.0))


def _fail(message: str, msg, path: str) -> None:
    if msg is not None:
        raise AssertionError(msg(message) if callable(msg) else msg)
    raise AssertionError(message + (f"\n\nThe failure occurred for item {path}" if path else ""))


def _compare_scalars(actual, expected, rtol, atol, equal_nan: bool, msg, path: str) -> None:
    if isinstance(actual, bool) or isinstance(expected, bool):
        rtol, atol = (0.0, 0.0) if rtol is None else (rtol, atol)
    elif rtol is None:
        rtol, atol = (1e-7, 1e-7) if isinstance(actual, float) or isinstance(expected, float) else (0.0, 0.0)
    a, e = complex(actual).real, complex(expected).real
    if (math.isnan(a) and math.isnan(e) and equal_nan) or a == e:
        return
    diff = abs(a - e)
    if diff <= atol + rtol * abs(e):
        return
    rel = diff / abs(e) if e != 0 else math.inf
    _fail(
        f"Scalars are not close!\n\nExpected {expected} but got {actual}.\n"
        f"Absolute difference: {diff} (up to {atol} allowed)\nRelative difference: {rel} (up to {rtol} allowed)",
        msg,
        path,
    )


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, check_device, msg, path) -> None:
    if actual.shape != expected.shape:
        _fail(
            f"The values for attribute 'shape' do not match: torch.Size({list(actual.shape)}) != "
            f"torch.Size({list(expected.shape)}).",
            msg,
            path,
        )
    if check_dtype and actual.dtype is not expected.dtype:
        _fail(
            f"The values for attribute 'dtype' do not match: torch.{actual.dtype.name} != torch.{expected.dtype.name}.",
            msg,
            path,
        )
    if check_device and actual.device != expected.device:
        _fail(f"The values for attribute 'device' do not match: {actual.device} != {expected.device}.", msg, path)
    d = dt.promote(actual.dtype, expected.dtype)
    rtol, atol = _tolerances(d, rtol, atol)
    compute = np.float64 if d.is_floating_point or d.category < 2 else np.int64
    a = np.asarray(actual.numpy()).astype(compute)
    e = np.asarray(expected.numpy()).astype(compute)
    if d.category == 1:
        a, e = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan) | (a == e)
    if close.all():
        return
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(a - e)
        rel = diff / np.abs(e)
    diff = np.where(close, 0, diff)
    rel = np.where(close, 0, rel)
    if a.size == 1:
        _compare_scalars(a.reshape(-1)[0].item(), e.reshape(-1)[0].item(), rtol, atol, equal_nan, msg, path)
    equal = rtol == 0 and atol == 0
    mismatched = int((~close).sum())
    worst_abs = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), a.shape)
    worst_rel = np.unravel_index(int(np.nanargmax(np.where(np.isnan(rel), np.inf, rel))), a.shape)

    def number(v):
        return int(v) if equal and np.isfinite(v) and float(v).is_integer() and d.category < 2 else float(v)

    lines = [
        f"Tensor-likes are not {'equal' if equal else 'close'}!",
        "",
        f"Mismatched elements: {mismatched} / {a.size} ({100.0 * mismatched / a.size:.1f}%)",
        f"Greatest absolute difference: {number(diff[worst_abs])} at index {tuple(int(i) for i in worst_abs)}"
        + ("" if equal else f" (up to {atol} allowed)"),
        f"Greatest relative difference: {float(rel[worst_rel])} at index {tuple(int(i) for i in worst_rel)}"
        + ("" if equal else f" (up to {rtol} allowed)"),
    ]
    _fail("\n".join(lines), msg, path)


def _compare(actual, expected, path, **kw) -> None:
    if isinstance(actual, (Tensor, np.ndarray)) and isinstance(expected, (Tensor, np.ndarray)):
        a = actual if isinstance(actual, Tensor) else Tensor(actual)
        e = expected if isinstance(expected, Tensor) else Tensor(expected)
        return _compare_tensors(
            a, e, kw["rtol"], kw["atol"], kw["equal_nan"], kw["check_dtype"], kw["check_device"], kw["msg"], path
        )
    if isinstance(actual, numbers.Number) and isinstance(expected, numbers.Number):
        return _compare_scalars(actual, expected, kw["rtol"], kw["atol"], kw["equal_nan"], kw["msg"], path)
    if isinstance(actual, Mapping) and isinstance(expected, Mapping):
        if set(actual) != set(expected):
            _fail(
                f"The keys of the mappings do not match:\n{sorted(map(str, actual))} != {sorted(map(str, expected))}",
                kw["msg"],
                path,
            )
        for k in actual:
            _compare(actual[k], expected[k], f"{path}[{k!r}]", **kw)
        return None
    is_seq = (Sequence,)
    if (
        isinstance(actual, is_seq)
        and isinstance(expected, is_seq)
        and not isinstance(actual, str)
        and not isinstance(expected, str)
    ):
        if len(actual) != len(expected):
            _fail(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}", kw["msg"], path)
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{path}[{i}]", **kw)
        return None
    raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.")


def assert_close(
    actual,
    expected,
    *,
    allow_subclasses: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    msg=None,
) -> None:
    """Raise AssertionError unless ``actual`` and ``expected`` are close (``torch.testing.assert_close``):
    ``|actual - expected| <= atol + rtol * |expected|`` elementwise, for tensors (and NumPy
    arrays) of one shape, and with ``check_dtype`` / ``check_device`` one dtype and device;
    Python numbers; and sequences or mappings of those, compared item by item. Default
    tolerances by dtype as PyTorch (float32: rtol 1.3e-6, atol 1e-5; float64: 1e-7, 1e-7;
    float16: 1e-3, 1e-5; bfloat16: 1.6e-2, 1e-5; integers and bool: exact). NaNs are equal only
    with ``equal_nan``. ``msg``: a string, or a callable given the default message, replacing it.

    Raises:
        AssertionError: the inputs are not close (PyTorch's message: the mismatched elements, the
            greatest absolute and relative differences and where).
        ValueError: only one of ``rtol`` and ``atol`` given.
        TypeError: inputs of types that cannot be compared (a tensor and a number).
    """
    if (rtol is None) != (atol is None):
        missing = "atol" if atol is None else "rtol"
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {missing}.")
    _compare(
        actual,
        expected,
        "",
        rtol=rtol,
        atol=atol,
        equal_nan=equal_nan,
        check_dtype=check_dtype,
        check_device=check_device,
        msg=msg,
    )


__all__ = ["assert_close"]
