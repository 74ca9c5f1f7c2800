"""The thread count of the BLAS libraries loaded in this process, set for the length of a call.

CPU plans run their products on one thread when they are small (``lowering/cpu/plan.py``:
``CpuPlan.single_thread_blas``), and the LSTM recurrence (``ops/recurrent.py``) runs its small
per-step products on one thread in its reference and in its plan step alike: OpenBLAS's idle
threads spin, and on a busy or virtual machine waking them cost up to half a millisecond per
product (a 35-step two-layer LSTM language model's step: 70 ms instead of 10), and one thread
gives the same bits wherever the loop runs.
"""

from __future__ import annotations

import contextlib
import threading


class _BLASThreads:
    """Sets the number of threads of the BLAS libraries loaded in this process (through
    threadpoolctl, found once) for the duration of a plan run.

    The setting is process-wide: runs in several threads share it, counted, so the first run to
    limit saves the setting and the last one to finish restores it (a plain save/restore per run
    would leave BLAS limited when two runs overlap)."""

    def __init__(self):
        self.libs = None
        self.lock = threading.Lock()
        self.users = 0
        self.saved: list = []

    def _find(self) -> list:
        """``(get, set)`` of each BLAS library's thread count: OpenBLAS's own functions, called
        directly (through threadpoolctl's controller, a limit and restore cost ~4 us per plan
        run: a tenth of a small training step), else the controller's methods."""
        try:
            from threadpoolctl import ThreadpoolController

            controllers = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
        except Exception:  # noqa: BLE001 - no threadpoolctl, or a library it cannot drive: leave BLAS alone
            return []
        found = []
        for lib in controllers:
            get = put = None
            if lib.internal_api == "openblas" and getattr(lib, "threading_layer", None) != "openmp":
                try:  # (OpenBLAS over OpenMP: its limit is per thread, threadpoolctl's path)
                    get = lib._get_symbol("openblas_get_num_threads")
                    put = lib._get_symbol("openblas_set_num_threads")
                except Exception:  # noqa: BLE001 - another threadpoolctl: its public methods
                    get = put = None
            if get is None or put is None:
                found.append((lambda lib=lib: lib.num_threads, lib.set_num_threads))
            else:
                found.append((get, put))
        return found

    def limit(self, n: int) -> None:
        with self.lock:
            if self.libs is None:
                self.libs = self._find()
            if self.users == 0:
                self.saved = []
                for get, put in self.libs:
                    k = get()
                    if k != n:
                        put(n)
                        self.saved.append((put, k))
            self.users += 1

    def restore(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                for put, k in self.saved:
                    put(k)


blas_threads = _BLASThreads()


@contextlib.contextmanager
def one_thread():
    """BLAS on one thread inside the block (counted with the plans' limits: see _BLASThreads)."""
    blas_threads.limit(1)
    try:
        yield
    finally:
        blas_threads.restore()
