"""What a captured step's recording sees besides its ops (read by ``lazyvic.capture``).

``lazyvic.compile`` replays a whole training step (forward, ``backward()``, ``optimizer.step()``)
without running its Python again. For that its recording must know more than the trace: which
tensors the step updated (parameters, optimizer state, ``.grad``, buffers), which modules and
optimizers it used (their tensors are read at replay time, not frozen), and which Python values
change from one step to the next although the program does not (the learning rate and bias
corrections, the random generator's position). The front end and the library report these here
while a :class:`StepRecorder` is active in the calling thread; nothing is recorded otherwise.

Per-step values: a producer of such values (``Optimizer.step``, a random draw) makes its scalar
nodes itself and hands them to :meth:`StepRecorder.dynamic` with a function that computes the
next step's values; the replay calls these functions in the recorded order (so a scheduler's
``step`` recorded with :meth:`StepRecorder.host` between two optimizer steps runs between them
again) and feeds their values to the plan's scalar inputs.

The hooks cost one read of a module global (:data:`active`) per call when nothing records.
"""

from __future__ import annotations

import threading

# The number of recorders active in any thread: the hooks read this first (a global read).
active = 0
_local = threading.local()
_lock = threading.Lock()


class StepRecorder:
    """What one recording of a step saw (filled by the hooks below).

    Attributes:
        mutated: ``{id(tensor): (tensor, node before its first update)}`` for every tensor
            updated in place (``_assign``, ``.data =``) during the recording.
        modules, optimizers: the modules called and the optimizers stepped or zeroed, by id.
        cleared: ids of parameters whose ``.grad`` the step set to None before reading it.
        events: ``[(nodes, fn)]`` in order: ``fn()`` gives the next values of ``nodes`` (scalar
            nodes; ``()`` for a host-only call such as a scheduler's step).
        refused: the first reason this step cannot be replayed, or None.
    """

    def __init__(self):
        self.mutated: dict = {}
        self.modules: dict = {}
        self.optimizers: dict = {}
        self.cleared: set = set()
        self.events: list = []
        self.refused: str | None = None
        self._host_depth = 0

    # -- what the hooks call ----------------------------------------------------------------
    def dynamic(self, nodes: tuple, fn) -> None:
        """The scalar ``nodes`` take the values ``fn()`` returns at each replay (in order)."""
        if self._host_depth == 0:
            self.events.append((tuple(nodes), fn))

    def host(self, fn):
        """Run ``fn()`` now and again, in this order, at every replay (a host-only step: a
        learning-rate scheduler's). Calls made inside ``fn`` are not recorded again."""
        if self._host_depth == 0:
            self.events.append(((), fn))
        self._host_depth += 1
        try:
            return fn()
        finally:
            self._host_depth -= 1

    def refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason


def current() -> StepRecorder | None:
    """The calling thread's active recorder, or None."""
    return getattr(_local, "rec", None) if active else None


class recording:
    """``with recording() as rec:`` makes ``rec`` the calling thread's recorder."""

    def __enter__(self) -> StepRecorder:
        global active
        if getattr(_local, "rec", None) is not None:
            raise RuntimeError("lazyvic.compile: a captured step called inside another one's recording")
        self.rec = StepRecorder()
        _local.rec = self.rec
        with _lock:
            active += 1
        return self.rec

    def __exit__(self, *exc) -> None:
        global active
        _local.rec = None
        with _lock:
            active -= 1


def note_mutation(t) -> None:
    """``t`` is about to be updated in place (its node replaced): keep its node from before."""
    rec = getattr(_local, "rec", None)
    if rec is not None and id(t) not in rec.mutated:
        rec.mutated[id(t)] = (t, t._node)


def note_module(m) -> None:
    rec = getattr(_local, "rec", None)
    if rec is not None:
        rec.modules[id(m)] = m


def note_optimizer(opt) -> StepRecorder | None:
    """Note ``opt`` (stepped or zeroed) and return the recorder, or None."""
    rec = getattr(_local, "rec", None)
    if rec is not None:
        rec.optimizers[id(opt)] = opt
    return rec


__all__ = ["StepRecorder", "active", "current", "note_module", "note_mutation", "note_optimizer", "recording"]
