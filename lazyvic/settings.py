"""Process-wide settings that PyTorch scripts make first: threads, the default dtype, the float32
matmul precision (``lazyvic.set_num_threads`` ...).

Below every other layer (it imports only ``dtypes`` and ``errors``; Numba and threadpoolctl are
imported when a thread count is set).
"""

from __future__ import annotations

import numbers
import warnings

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError, UnsupportedOpError

_PRECISIONS = ("highest", "high", "medium")
_state = {"float32_matmul_precision": "highest"}


def set_num_threads(num_threads: int) -> None:
    """Set the threads lazyvic computes with: Numba's thread count for the parallel kernels
    (``numba.set_num_threads``, for the calling thread, capped at ``NUMBA_NUM_THREADS``, which is
    fixed when Numba starts) and the thread limit of the BLAS libraries loaded in the process
    (through threadpoolctl: lazyvic's own products run BLAS on one thread whatever it is, and
    restore it).

    Raises ValueError for a count that is not a positive integer (PyTorch raises RuntimeError)."""
    if isinstance(num_threads, bool) or not isinstance(num_threads, numbers.Integral) or num_threads < 1:
        raise ValueError(f"set_num_threads: expects a positive integer, got {num_threads!r}")
    import numba

    numba.set_num_threads(min(int(num_threads), numba.config.NUMBA_NUM_THREADS))
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(num_threads), user_api="blas")
    except Exception:  # noqa: BLE001 - no threadpoolctl, or a BLAS it cannot drive: leave BLAS as it is
        pass


def get_num_threads() -> int:
    """The number of threads of lazyvic's parallel kernels (Numba's thread count for this thread)."""
    import numba

    return numba.get_num_threads()


def get_default_dtype() -> dt.DType:
    """The dtype of Python floats and of the float creation functions: ``lazyvic.float32``."""
    return dt.default_float


def set_default_dtype(d) -> None:
    """Accepts ``lazyvic.float32`` (the default, so nothing changes).

    Raises:
        UnsupportedOpError: float64 (lazyvic's default float dtype is fixed at float32; pass
            ``dtype=lazyvic.float64`` or call ``.double()`` instead).
        DTypeError: a dtype that is not floating point (PyTorch raises TypeError too).
    """
    d = dt.get_dtype(d)
    if not d.is_floating_point:
        raise DTypeError(f"set_default_dtype: only floating-point dtypes can be the default, got {d.name}")
    if d is not dt.default_float:
        raise UnsupportedOpError(
            f"set_default_dtype: lazyvic's default float dtype is fixed at {dt.default_float.name}, got {d.name}; "
            f"pass dtype=lazyvic.{d.name} to the creation functions or call .double() instead"
        )


def set_float32_matmul_precision(precision: str) -> None:
    """Accepts ``"highest"``, ``"high"`` and ``"medium"`` (read back by
    :func:`get_float32_matmul_precision`) without effect: lazyvic computes float32 products in
    float32 (TF32/bfloat16 products only under ``lazyvic.autocast``). Another value warns and
    changes nothing, as in PyTorch."""
    if precision not in _PRECISIONS:
        warnings.warn(
            f"set_float32_matmul_precision: {precision!r} is not one of 'highest', 'high' or 'medium'; "
            f"the call has no effect",
            UserWarning,
            stacklevel=2,
        )
        return
    _state["float32_matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    """The value last set by :func:`set_float32_matmul_precision` (``"highest"`` by default)."""
    return _state["float32_matmul_precision"]
