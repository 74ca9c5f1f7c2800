"""Whether other processes are busy, for the steps that run on Numba's threads (lowering/cpu/team.py).

The steps whose work is split among Numba's threads (products in pieces, depthwise convolutions,
the convolutions' copies) and the parallel kernels (chunks fixed by the sizes) compute the same
bits whichever thread runs a share, so whether they split may follow the machine's load: on a
quiet machine two threads, on one where another process holds a core, the calling thread alone
(the kernels: ``CpuPlan.run``).
"""

from __future__ import annotations

import os
import threading
import time

import numba


class _OtherLoad:
    """Whether other processes keep about a core busy (``busy()``): the CPU time all cores spent
    outside idle (``/proc/stat``) less this process's own (``time.process_time``: its threads,
    spinning ones included), per second of wall time, sampled at most every SAMPLE_S seconds.
    Without ``/proc/stat`` (not Linux) never busy.

    A thread team's second thread on a core another process holds waits a scheduler slice at each
    parallel region's end: MobileNetV2 at batch 1, with a spinning process beside it, took 33-41
    ms a call with its products and depthwise layers on two threads against 16-21 ms on one (9-10
    ms and 12-13 ms quiet). Which thread runs a piece does not change its bits, so the choice may
    follow the load."""

    def __init__(self):
        self.lock = threading.Lock()
        self.when = -1.0
        self.last = None
        self.busy = False
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _sample(self):
        try:
            with open("/proc/stat", "rb") as f:
                fields = f.readline().split()[1:]
            ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            used = sum(ticks) - ticks[3] - ticks[4]
        except (OSError, ValueError, IndexError):  # no /proc/stat, or not the layout Linux's is
            return None
        return time.monotonic(), used / self.tick, time.process_time()

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.when < SAMPLE_S:
            return self.busy
        with self.lock:
            if now - self.when < SAMPLE_S:
                return self.busy
            self.when = now
            sample = self._sample()
            if sample is None:
                self.busy = False
            elif self.last is not None and sample[0] > self.last[0]:
                others = (sample[1] - self.last[1]) - (sample[2] - self.last[2])
                self.busy = others / (sample[0] - self.last[0]) >= BUSY_CORES
            self.last = sample
            return self.busy


# Load sampled at most this often (seconds), and other processes' cores at which teams stand down.
SAMPLE_S = 0.2
BUSY_CORES = 0.5
other_load = _OtherLoad()


def on_team(flag: bool) -> bool:
    """Whether a step whose ``team`` flag is ``flag`` runs on Numba's threads now: the plan's
    one thread team (flag set by ``CpuBackend``), and no other process busy (:class:`_OtherLoad`)."""
    return flag and not other_load()


# Work of fewer elements runs on the calling thread even on the team (a parallel region costs a
# few microseconds to start; MobileNetV2's smallest depthwise layers take about 100 us).
PARALLEL_MIN_ELEMENTS = 1 << 14


def shared(flag: bool, serial, parallel, size: int, *args) -> None:
    """``parallel(*args, threads)`` (each of Numba's ``threads`` a share of the work) when
    :func:`on_team` says so for ``flag`` and ``size`` (elements) is at least PARALLEL_MIN_ELEMENTS,
    else ``serial(*args)``: the convolution steps' copies and depthwise kernel. The same result
    either way."""
    if size >= PARALLEL_MIN_ELEMENTS and on_team(flag):
        threads = numba.get_num_threads()
        if threads > 1:
            parallel(*args, threads)
            return
    serial(*args)
