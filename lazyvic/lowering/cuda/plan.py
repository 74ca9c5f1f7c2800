"""The CUDA plan: steps over device arrays (``lowering/cuda/steps.py``, ``index_steps.py``),
their memory plan (device slots allocated at the first run), and :meth:`CudaPlan.run`.

Host steps and every host/device transfer are counted in ``CudaPlan.stats`` (and handed to
the target's ``on_copy``: the runtime's metrics); the ops run as NumPy references are the
plan's ``fallbacks``, as on the CPU. The tensors of a run that raised stay pending
(``lazyvic.tensor.sync``), so the clamped results of a failed index check are never seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lazyvic.lowering.backend import Plan
from lazyvic.lowering.cuda.steps import CudaKernelStep, HostStep
from lazyvic.lowering.cuda.target import CudaTarget


@dataclass
class CudaPlan(Plan):
    """A plan whose steps run on device arrays of its ``target``; see :meth:`run`."""

    # Words of the error buffer per index check: the running first bad position, the index
    # there, the position found by the last run (the view's size: none); see
    # the CUDA library's index_check and index_check_value.
    ERROR_WORDS = 3

    name: str
    entries: list = field(repr=False)
    steps: list = field(repr=False)
    input_pos: list = field(repr=False)  # (entry position, input slot)
    outputs: list = field(repr=False)  # per trace output: ("buffer", pos, dtype) | ("scalar", slot, dtype)
    memory: object = None
    groups: list = field(default_factory=list, repr=False)
    fallbacks: tuple = ()  # ops run as NumPy references on the host
    stats: dict = field(default_factory=dict)
    pool: list = field(default=None, repr=False)  # device slots, allocated at the first run
    env_template: list = field(default=None, repr=False)
    checks: list = field(default_factory=list, repr=False)  # per index check, in plan order: (op, size, n, asked_by)
    errors: object = field(default=None, repr=False)  # device int64, ERROR_WORDS per check
    errors_reset: bool = field(default=False, repr=False)  # send the buffer (again) before the next checks
    scalar_copies: dict = field(default_factory=dict, repr=False)  # (slot, dtype) -> DeviceCopy (see steps.source)
    target: CudaTarget = field(default_factory=CudaTarget, repr=False)

    device = "cuda"

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, CudaKernelStep)]

    @property
    def host_steps(self) -> list:
        return [s for s in self.steps if isinstance(s, HostStep)]

    # -- copies, counted in ``stats`` and handed to ``target.on_copy`` -------------------------
    def count(self, what: str, nbytes: int) -> None:
        """Count one copy (``<what>`` and ``<what>_bytes`` in ``stats``; ``what`` is
        ``host_to_device`` or ``device_to_host``)."""
        stats = self.stats
        stats[what] = stats.get(what, 0) + 1
        stats[what + "_bytes"] = stats.get(what + "_bytes", 0) + int(nbytes)
        if self.target.on_copy is not None:
            self.target.on_copy(what, int(nbytes))

    def to_device(self, a: np.ndarray):
        """A flat device copy of host array ``a`` (counted)."""
        a = np.ascontiguousarray(a).reshape(-1)
        self.count("host_to_device", a.nbytes)
        return self.target.cuda.to_device(a)

    def to_host(self, d, shape) -> np.ndarray:
        """A host copy of flat device array ``d`` (Numba or CuPy) with ``shape`` (counted)."""
        a = d.copy_to_host() if hasattr(d, "copy_to_host") else self.target.cupy.asnumpy(d)
        self.count("device_to_host", a.nbytes)
        return a.reshape(shape)

    # -- runs ------------------------------------------------------------------------------
    def _prepare(self) -> None:
        cuda = self.target.cuda
        self.pool = [cuda.device_array(n, np.uint8) for n in self.memory.slot_bytes]
        env = [None] * len(self.entries)
        for pos, slot in self.memory.slot_of.items():
            shape, dtype = self.entries[pos].shape, self.entries[pos].dtype
            n = math.prod(shape)
            env[pos] = self.pool[slot][: n * dtype.itemsize].view(dtype.np) if n else cuda.device_array(0, dtype.np)
        self.env_template = env
        self.errors_reset = True

    def _fresh_errors(self) -> None:
        """Send the error buffer with no error found (at the first run, or after a run stopped
        by an exception inside a step: a check may have left its running minimum set)."""
        words = np.zeros((len(self.checks), self.ERROR_WORDS), np.int64)
        for k, (_, _, n, _) in enumerate(self.checks):
            words[k, 0] = words[k, 2] = n
        if self.errors is None:
            self.errors = self.to_device(words)
        else:
            self.count("host_to_device", words.nbytes)
            self.errors.copy_to_device(words.reshape(-1))
        self.errors_reset = False

    def raise_index_error(self) -> None:
        """Copy the error buffer back (one copy for all the checks) and raise lazyvic's IndexError
        for the first failing check in plan order, with the CPU plan's message. The buffer is
        ready for the next run already: each check's second kernel resets its minimum."""
        from lazyvic.ops.index import index_error

        found = self.to_host(self.errors, (len(self.checks), self.ERROR_WORDS))
        for (op, size, n, asked_by), (_, value, first) in zip(self.checks, found):
            if first < n:
                raise index_error(op, value, size, asked_by)

    def run(self, inputs: list, scalars: list, debug: int = 0, to_host: bool = False) -> list:
        """Run the plan. ``inputs``: per input slot, a host (NumPy) or C-contiguous device
        array; ``scalars``: per scalar slot, a Python number. Returns per trace output a flat
        device array the caller owns, as the runtime stores it (``CudaTarget.storage``), or,
        with ``to_host``, a NumPy array of the output's shape. ``debug`` is not used.

        Raises lazyvic's IndexError, after the last step, when an index is out of range (see
        ``lowering/cuda/index_steps.py``)."""
        cuda = self.target.cuda
        if self.pool is None:
            self._prepare()
        if self.checks and self.errors_reset:
            self._fresh_errors()
        env = self.env_template[:]
        for pos, slot in self.input_pos:
            a = inputs[slot]
            env[pos] = self.to_device(a) if isinstance(a, (np.ndarray, np.generic)) else a.reshape(-1)
        for kind, pos, dtype in self.outputs:
            if kind == "buffer" and env[pos] is None:
                env[pos] = cuda.device_array(math.prod(self.entries[pos].shape), dtype.np)
        try:
            for step in self.steps:
                step(self, env, scalars)
        except BaseException:
            self.errors_reset = True
            raise
        if self.checks:
            self.raise_index_error()
        outs, given = [], set()
        for kind, pos, dtype in self.outputs:
            if kind == "scalar":
                value = np.array(scalars[pos], dtype=dtype.np)
                outs.append(value if to_host else self.target.storage(self.to_device(value)))
                continue
            if to_host:
                outs.append(self.to_host(env[pos], self.entries[pos].shape))
                continue
            d = env[pos]
            if self.entries[pos].op == "buffer" or pos in given:
                # An output folded onto an input, or two outputs merged by CSE: own storage.
                d = cuda.device_array(d.size, d.dtype)
                d.copy_to_device(env[pos])
            given.add(pos)
            outs.append(self.target.storage(d))
        return outs
