"""The backend interface: what a device needs to turn a trace into a runnable Plan.

A :class:`Backend` supplies a code generator and step builders; the compile loop, the same
for every device, is ``lowering/pipeline.py``. Backends: ``lowering/cpu`` (Numba kernels,
BLAS through NumPy) and ``lowering/cuda`` (numba-cuda kernels, cuBLAS through CuPy). The
runtime makes one per device (``lazyvic.runtime.executor.backend``), handing it what only
the runtime knows (the buffer pool for outputs, whether CUDA is the simulator, CuPy, the
copy counters), and runs every plan the same way: ``plan.run(inputs, scalars, debug)``.
"""

from __future__ import annotations

import abc

from lazyvic.lowering import pipeline


class Plan(abc.ABC):
    """A compiled trace: what the runtime runs and what the tools read.

    Attributes every plan has:
        name: ``plan_<hash>`` (CPU) or ``cuda_plan_<hash>`` of the trace key.
        device: ``"cpu"`` or ``"cuda"``.
        entries: the trace's named entries after the graph passes (``Entry``: op, attrs,
            inputs, shape, dtype, and the scope and trace position it came from).
        steps: what a run does, in order; each has ``name``, ``reads()`` and ``writes()``
            (entry positions) and, when it computes a group, ``out``.
        groups: the fusion groups (``lowering.fusion.FusionGroup``) in run order.
        memory: the memory plan (``lowering.memory.MemoryPlan``).
        fallbacks: the ops run as NumPy references (no kernel yet).
        stats: counters of the compile and the runs (kernels compiled or loaded, copies).
        kernels: the steps that run generated kernels.
    """

    device = "cpu"
    # A plan lowered for symbolic sizes: the names of its size symbols (the order ``run``'s
    # ``sizes`` binds them in) and the guards its lowering relied on; () for a plan of fixed sizes.
    symbols: tuple = ()
    guards: tuple = ()

    def bind_symbols(self, symbols: tuple, guards: tuple) -> None:
        """Record the symbols and guards of a plan lowered for symbolic sizes."""
        self.symbols, self.guards = symbols, guards

    def admits(self, sizes: tuple) -> bool:
        """Whether every guard holds for the binding ``sizes`` (one value per symbol)."""
        env = dict(zip(self.symbols, sizes))
        return all(g.holds(env) for g in self.guards)

    @abc.abstractmethod
    def run(self, inputs: list, scalars: list, debug: int = 0) -> list:
        """Run the plan on ``inputs`` (per input slot: an array on the plan's device, or a
        NumPy array) and ``scalars`` (per scalar slot: a Python number); returns per trace
        output an array on the plan's device that the caller owns. ``debug >= 4`` prints
        per-step times where the backend measures them."""

    @property
    @abc.abstractmethod
    def kernels(self) -> list:
        """The steps that run generated kernels."""


class Backend(abc.ABC):
    """One device's half of lowering; ``compile`` runs the shared loop (``lowering/pipeline.py``).

    Hooks the loop calls, in order:
        generate(entries, materialized, group): a kernel source for a fused group, or raise
            ``lowering.fusion.NeedsMaterialize`` to ask for a buffer;
        kernel_steps(lowered, group, source): the steps that run a group's kernel;
        describe_kernel(source, group): the ``LAZYVIC_DEBUG=2`` line of a kernel;
        library_step(lowered, group, args): the step of a library group (matmul, conv2d, ...)
            with its operands ``args`` (``lowering.pipeline.Operand``), or None: the backend
            has none, and reference_step(lowered, group, args) runs the op's NumPy reference;
        make_plan(lowered, name, steps, input_pos, out_specs, memory, fallbacks, seconds).
    """

    device: str = "cpu"
    plan_prefix: str = "plan_"

    def compile(self, trace, cache_dir=None, debug: int | None = None, named=None, symbols=()) -> Plan:
        """Lower canonical ``trace`` to a :class:`Plan` of this backend; generated kernel files go
        under ``cache_dir`` (default: :meth:`default_cache_dir`). ``named``/``symbols``: lower it
        for symbolic sizes (see ``pipeline.compile_plan``)."""
        if cache_dir is None:
            cache_dir = self.default_cache_dir()
        if debug is None:
            debug = self.default_debug()
        return pipeline.compile_plan(trace, self, cache_dir, debug, named, symbols)

    @abc.abstractmethod
    def default_cache_dir(self):
        """Where kernel files go when ``compile`` is given no directory."""

    def default_debug(self) -> int:
        """The debug level when ``compile`` is given none."""
        return 0

    @abc.abstractmethod
    def generate(self, entries, materialized, group): ...

    def prepare(self, lowered) -> None:
        """Called once the kernels' sources are generated, before any step is built: a backend
        may compile them all at once here (the CPU one compiles side by side in worker processes).
        The default does nothing: ``kernel_steps`` compiles each kernel when it is built."""
        return None

    @abc.abstractmethod
    def kernel_steps(self, lowered, group, source) -> list: ...

    @abc.abstractmethod
    def describe_kernel(self, source, group) -> str: ...

    @abc.abstractmethod
    def library_step(self, lowered, group, args): ...

    @abc.abstractmethod
    def reference_step(self, lowered, group, args): ...

    @abc.abstractmethod
    def make_plan(self, lowered, name, steps, input_pos, out_specs, memory, fallbacks, seconds) -> Plan: ...
