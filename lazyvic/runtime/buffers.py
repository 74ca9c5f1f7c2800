"""Output buffer pool: large output arrays are reused once their tensor is gone.

A fresh 64 MB array costs about 19 ms of page faults here, more than the kernel
that fills it. Outputs of at least ``MIN_BYTES`` come from this pool; when the
node holding one is garbage-collected, the array returns to the pool unless
something else (a NumPy array the user got from ``.numpy()``, or a view of it)
still refers to it. Arrays start on a 64-byte boundary (``lowering.memory.aligned_empty``:
BLAS writes into them). The CPU backend takes its outputs from :func:`take`.

Thread-safe: the pool is shared by every thread, behind one lock taken only for large arrays.
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from lazyvic.lowering.memory import ALIGN, aligned_empty, aligned_view

MIN_BYTES = 1 << 20
MAX_POOLED_BYTES = 1 << 30
MAX_WATCHED = 16  # released-but-still-referenced allocations checked again later

_free: dict = {}  # nbytes -> list of raw uint8 arrays
_pooled_bytes = [0]
_released: list = []  # allocations whose node died, not yet checked
_lock = threading.Lock()  # guards _free, _pooled_bytes and the sweep of _released


def take(shape, dtype, aligned: bool = True) -> np.ndarray:
    """An output array of ``shape``/``dtype``, pooled when it is large.

    Large and ``aligned`` arrays start on a 64-byte boundary (BLAS outputs must);
    small unaligned ones are plain ``np.empty`` (16-byte aligned, 10x cheaper to make).
    """
    dtype = np.dtype(dtype)
    n = dtype.itemsize
    for s in shape:
        n *= s
    if n < MIN_BYTES and not aligned:
        return np.empty(shape, dtype)
    if n >= MIN_BYTES:
        with _lock:
            if _released:
                _sweep()
            free = _free.get(n + ALIGN)
            raw = free.pop() if free else None
            if raw is not None:
                _pooled_bytes[0] -= raw.nbytes
        if raw is not None:
            return aligned_view(raw, n, shape, dtype)
    return aligned_empty(shape, dtype)


def _give_back(raw: np.ndarray) -> None:
    # Called while the node is being destroyed (in whichever thread drops it), before its
    # array is released: decide later, in take(), whether anything still refers to the
    # allocation. A list append is atomic: no lock (a finalizer may run inside take()).
    _released.append(raw)


def _sweep() -> None:
    # Called with _lock held.
    held = []
    while _released:
        raw = _released.pop()
        # Referents here: this frame's variable and getrefcount's argument (popped from the list).
        if sys.getrefcount(raw) > 2:
            held.append(raw)  # the user still holds the array or a view of it: look again later
            continue
        if _pooled_bytes[0] + raw.nbytes <= MAX_POOLED_BYTES:
            _free.setdefault(raw.nbytes, []).append(raw)
            _pooled_bytes[0] += raw.nbytes
    # A common loop keeps the last result (y = f(x).numpy()) until the next call returns:
    # keep watching a few held allocations, the most recent first.
    _released.extend(reversed(held[:MAX_WATCHED]))


def track(owner, array: np.ndarray) -> None:
    """Return ``array`` to the pool when ``owner`` (the realized node) dies, if it is large."""
    if array.nbytes < MIN_BYTES:
        return
    raw = array.base
    if raw is None or raw.base is not None or raw.dtype != np.uint8 or raw.nbytes != array.nbytes + ALIGN:
        return  # not an allocation of this pool
    # The finalizer holds the raw allocation; every view of it (the node's array, a
    # user's .numpy() result, slices of it) refers to it as its base.
    weakref.finalize(owner, _give_back, raw)


def clear() -> None:
    with _lock:
        _released.clear()
        _free.clear()
        _pooled_bytes[0] = 0
