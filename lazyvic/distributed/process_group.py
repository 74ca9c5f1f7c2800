"""The default process group: which processes take part, and the transport between them.

A process group is an MPI communicator (``mpi4py``: Open MPI or MPICH from the system packages)
for CPU processes on one or several machines. lazyvic has no transport of its own: every message
goes through MPI's non-blocking collectives (``Ialltoall``, ``Iallgather``, ``Ibcast``,
``Ibarrier``), which this module waits on with a deadline, so that a rank that died or called
another collective makes the others fail with :class:`DistributedError` instead of hanging.

Processes are started by an MPI launcher (``lazyvic run -n 4 script.py``, or ``mpirun``
directly); :func:`init_process_group` then reads the rank and world size from MPI. A script run
without a launcher is a group of one, as ``torchrun --nproc-per-node 1`` would make it.

Backends (``init_process_group(backend=...)``):

``"mpi"``
    MPI through mpi4py, for tensors on any device (a CUDA tensor goes through host memory).
``"gloo"``
    Accepted as a name for ``"mpi"``, so that CPU scripts written for PyTorch's gloo run
    unchanged under ``lazyvic run``.
``"nccl"``
    NCCL through CuPy for CUDA tensors, GPU to GPU (:mod:`lazyvic.distributed.nccl`); CPU
    tensors, objects and barriers go through MPI beside it, as PyTorch's ``"cpu:gloo,cuda:nccl"``.

This module also holds the transport of arrays every collective uses: the rank-order all-reduce
(:class:`ArrayAllReduce`, see :mod:`lazyvic.distributed.collectives`), the wire dtypes, the
counters, and the transport a plan's collective op calls (:func:`plan_transport`).

An unhandled exception on one rank aborts the whole job (``MPI_Abort``) once its traceback is
printed, as ``python -m mpi4py`` does: otherwise the other ranks would wait in their next
collective until the deadline.
"""

from __future__ import annotations

import datetime
import itertools
import os
import sys
import threading
import time

import numpy as np

from lazyvic.errors import ArgumentError, DistributedError, DTypeError, UnsupportedOpError
from lazyvic.ops import collective as _collective_op
from lazyvic.runtime import metrics

# PyTorch's default (torch.distributed.constants.default_pg_timeout): 30 minutes.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
BACKENDS = ("mpi", "gloo", "nccl")
SPIN_SECONDS = 0.005  # a wait tests its requests without sleeping this long (see ProcessGroup.wait)

_lock = threading.Lock()
_default: ProcessGroup | None = None
_keys = itertools.count(1)


class Scratch:
    """Free arrays by (shape, dtype): an all-reduce's receive and reduce buffers, used again by
    the next all-reduce of that size (a training step's buckets have the same sizes every step;
    fresh buffers cost a page fault per 4 KB at their first touch)."""

    def __init__(self):
        self.free: dict = {}

    def take(self, shape: tuple, dtype) -> np.ndarray:
        stack = self.free.get((shape, np.dtype(dtype)))
        return stack.pop() if stack else np.empty(shape, dtype)

    def give(self, a: np.ndarray) -> None:
        self.free.setdefault((a.shape, a.dtype), []).append(a)


class ProcessGroup:
    """The processes of a job and their communicator.

    Attributes:
        comm: the ``mpi4py.MPI.Intracomm`` (a duplicate of ``COMM_WORLD``: lazyvic's messages
            never match a user's own MPI calls).
        rank, size: this process's rank and the number of processes.
        backend: the backend's name as given (``"mpi"`` or ``"gloo"``).
        timeout: seconds a collective may wait for the other ranks.
    """

    def __init__(self, comm, backend: str, timeout: float):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.backend = backend
        self.timeout = timeout
        self.broken: str | None = None  # why a collective failed; later ones refuse to start
        self.key = next(_keys)  # names the group in a plan's collectives (ops/collective.py)
        self.scratch = Scratch()
        self.nccl = None  # the NcclTransport of an "nccl" group (lazyvic/distributed/nccl.py)

    def wait(self, requests: list, what: str, statuses: list | None = None) -> None:
        """Wait for MPI ``requests`` until the group's deadline (``statuses``: MPI.Status objects
        that take the finished requests' statuses, as ``MPI_Testall``'s).

        Raises:
            DistributedError: the deadline passed (``what`` names the collective). The group is
                then broken: the job is aborted when this process exits.
        """
        from mpi4py import MPI

        def testall(requests):
            return MPI.Request.Testall(requests, statuses)

        if testall(requests):
            return
        # Open MPI progresses a non-blocking collective only inside MPI calls: test without pause
        # (yielding the core to any other runnable process, as on a machine with more ranks than
        # cores) for SPIN_SECONDS, then back off to 1 ms sleeps so that a rank waiting for a slow
        # one leaves the core to it. (Sleeping from the start made a 34 KB all-reduce take
        # 870 us instead of 13: every round of the collective waited for a sleep.)
        start = time.monotonic()
        spin_until, deadline = start + SPIN_SECONDS, start + self.timeout
        while not testall(requests):
            now = time.monotonic()
            if now < spin_until:
                os.sched_yield()
                continue
            if now > deadline:
                self.broken = (
                    f"{what}: rank {self.rank} of {self.size} waited {self.timeout:g} s for the other ranks "
                    f"(a rank died, is stuck, or called another collective in another order)"
                )
                raise DistributedError(self.broken)
            time.sleep(0.001)

    def check(self, what: str) -> None:
        if self.broken is not None:
            raise DistributedError(f"{what}: the process group is broken by an earlier failure ({self.broken})")


def _mpi(what: str):
    try:
        from mpi4py import MPI
    except (ImportError, OSError, RuntimeError) as e:  # no mpi4py, or its wheel finds no libmpi
        raise DistributedError(
            f"{what}: the 'mpi' backend needs mpi4py and an MPI library (pip install mpi4py; the system's "
            f"Open MPI or MPICH, e.g. apt-get install openmpi-bin libopenmpi-dev): {e}"
        ) from e
    return MPI


def is_available() -> bool:
    """True: lazyvic.distributed is part of every build (the MPI backend needs mpi4py)."""
    return True


def is_mpi_available() -> bool:
    """True when mpi4py and the MPI library it loads import (the ``"mpi"`` and ``"gloo"``
    backends can start). Importing ``mpi4py.MPI`` initializes MPI in this process."""
    try:
        from mpi4py import MPI  # noqa: F401 (loads the MPI library)
    except (ImportError, OSError, RuntimeError):
        return False
    return True


def is_nccl_available() -> bool:
    """True when the ``"nccl"`` backend can start: a real GPU, CuPy and its NCCL."""
    from lazyvic.distributed import nccl

    return nccl.is_available()


def is_gloo_available() -> bool:
    """As :func:`is_mpi_available` (``"gloo"`` names the MPI backend here)."""
    return is_mpi_available()


def is_initialized() -> bool:
    """True between :func:`init_process_group` and :func:`destroy_process_group`."""
    return _default is not None


def _seconds(timeout, what: str) -> float:
    if timeout is None:
        env = os.environ.get("LAZYVIC_DIST_TIMEOUT")
        if env:
            try:
                return float(env)
            except ValueError:
                raise ArgumentError(f"{what}: LAZYVIC_DIST_TIMEOUT must be seconds, got {env!r}") from None
        return DEFAULT_TIMEOUT.total_seconds()
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if not seconds > 0:
        raise ArgumentError(f"{what}: timeout must be positive, got {timeout!r}")
    return seconds


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | float | None = None,
    world_size: int = -1,
    rank: int = -1,
    store=None,
    group_name: str = "",
    pg_options=None,
    device_id=None,
) -> None:
    """Join the job's default process group (``torch.distributed.init_process_group``).

    The rank and world size come from the MPI launcher. ``world_size`` and ``rank``, when given,
    must agree with it; ``init_method`` (``"env://"``, a ``tcp://`` or ``file://`` address),
    ``store``, ``group_name``, ``pg_options`` and ``device_id`` are accepted for compatibility and
    not used: MPI's launcher already connected the processes. The torchrun variables ``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` are set for code that reads them.

    Args:
        backend: ``"mpi"`` (default), ``"gloo"`` (the same) or ``"nccl"`` (CUDA tensors through
            NCCL, the rest through MPI; needs CuPy and one GPU per rank).
        timeout: how long a collective waits for the other ranks (a ``timedelta`` or seconds;
            default 30 minutes, or ``LAZYVIC_DIST_TIMEOUT`` seconds).

    Raises:
        DistributedError: already initialized; mpi4py or MPI missing; ``"nccl"`` without a GPU,
            CuPy or NCCL, or NCCL could not make its communicator (two ranks on one GPU).
        ArgumentError: an unknown backend; a ``world_size`` or ``rank`` MPI does not have.
    """
    global _default
    what = "init_process_group"
    name = (backend or "mpi").lower()
    if name not in BACKENDS:
        raise ArgumentError(f"{what}: unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    seconds = _seconds(timeout, what)
    if name == "nccl":  # before MPI starts: a GPU, CuPy and NCCL are there
        from lazyvic.distributed.nccl import require

        require(what)
    with _lock:
        if _default is not None:
            raise DistributedError(f"{what}: the default process group is already initialized")
        MPI = _mpi(what)
        comm = MPI.COMM_WORLD.Dup()
        group = ProcessGroup(comm, name, seconds)
        if world_size not in (-1, None) and world_size != group.size:
            comm.Free()
            raise ArgumentError(f"{what}: world_size={world_size}, but the MPI job has {group.size} processes")
        if rank not in (-1, None) and rank != group.rank:
            comm.Free()
            raise ArgumentError(f"{what}: rank={rank}, but MPI gave this process rank {group.rank}")
        local_rank, local_size = node_ranks(comm)
        os.environ.setdefault("RANK", str(group.rank))
        os.environ.setdefault("WORLD_SIZE", str(group.size))
        os.environ.setdefault("LOCAL_RANK", str(local_rank))
        os.environ.setdefault("LOCAL_WORLD_SIZE", str(local_size))
        if name == "nccl":
            from lazyvic.distributed.nccl import NcclTransport

            try:
                group.nccl = NcclTransport(group, lambda a: post_broadcast(group, a, 0, what)(), what)
            except DistributedError:
                comm.Free()
                raise
        _install_abort_on_error()
        _collective_op.transports[group.key] = plan_transport(group)
        _default = group


def node_ranks(comm) -> tuple[int, int]:
    """(rank among the processes of this machine, their number) in the communicator ``comm``."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    ranks = local.Get_rank(), local.Get_size()
    local.Free()
    return ranks


def destroy_process_group(group=None) -> None:
    """Leave the default process group (``torch.distributed.destroy_process_group``); a later
    :func:`init_process_group` joins again. Without a call, MPI is finalized at exit."""
    global _default
    with _lock:
        if _default is None:
            return
        g, _default = _default, None
        _collective_op.transports.pop(g.key, None)
        if g.nccl is not None:
            g.nccl.destroy()
        if g.broken is None:
            g.comm.Free()


def default_group(what: str) -> ProcessGroup:
    """The default group, checked usable.

    Raises:
        DistributedError: not initialized, or broken by an earlier timeout.
    """
    g = _default
    if g is None:
        raise DistributedError(
            f"{what}: Default process group has not been initialized, please make sure to call init_process_group."
        )
    g.check(what)
    return g


def group_of(group, what: str) -> ProcessGroup:
    """The group a collective runs in: ``None`` or ``group.WORLD`` mean the default one."""
    if group is not None and group is not WORLD:
        raise UnsupportedOpError(f"{what}: only the default group (group=None or group.WORLD) is supported")
    return default_group(what)


def get_rank(group=None) -> int:
    """This process's rank in the default group (0 .. world size - 1).

    Raises:
        DistributedError: :func:`init_process_group` was not called.
    """
    return group_of(group, "get_rank").rank


def get_world_size(group=None) -> int:
    """The number of processes in the default group.

    Raises:
        DistributedError: :func:`init_process_group` was not called.
    """
    return group_of(group, "get_world_size").size


def get_backend(group=None) -> str:
    """The default group's backend name (``"mpi"``, ``"gloo"`` or ``"nccl"``)."""
    return group_of(group, "get_backend").backend


class _World:
    """``torch.distributed.group.WORLD``: a name for the default group."""

    def __repr__(self) -> str:
        return "group.WORLD"


WORLD = _World()


class group:  # noqa: N801 (PyTorch's name: torch.distributed.group.WORLD)
    """``group.WORLD`` names the default process group."""

    WORLD = WORLD


_hook_installed = False


def _install_abort_on_error() -> None:
    """Abort the whole job after an unhandled exception (or at the exit of a broken group): the
    other ranks would otherwise wait in their next collective until the deadline."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        g = _default
        if g is not None and g.size > 1 and not issubclass(kind, (KeyboardInterrupt, SystemExit)):
            sys.stderr.flush()
            sys.stdout.flush()
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
    import atexit

    def at_exit():  # runs before mpi4py's MPI_Finalize (registered after it)
        g = _default
        if g is not None and g.broken is not None and g.size > 1:
            sys.stderr.flush()
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(1)

    atexit.register(at_exit)


def mpi_types():
    """(mpi4py.MPI, {numpy dtype: MPI datatype}) for the dtypes the transport moves as they are."""
    MPI = _mpi("lazyvic.distributed")
    return MPI, {
        np.dtype(np.float32): MPI.FLOAT,
        np.dtype(np.float64): MPI.DOUBLE,
        np.dtype(np.int8): MPI.INT8_T,
        np.dtype(np.int16): MPI.INT16_T,
        np.dtype(np.int32): MPI.INT32_T,
        np.dtype(np.int64): MPI.INT64_T,
        np.dtype(np.uint8): MPI.UINT8_T,
        np.dtype(np.bool_): MPI.UINT8_T,
    }


def wire_dtype(dtype, what: str = "lazyvic.distributed") -> np.dtype:
    """The NumPy dtype a lazyvic dtype travels and is reduced in (float16 and bfloat16: float32).

    Raises:
        DTypeError: no MPI datatype fits.
    """
    _, types = mpi_types()
    np_dtype = np.dtype(dtype.np)
    if np_dtype in types:
        return np_dtype
    if dtype.is_floating_point:
        return np.dtype(np.float32)
    raise DTypeError(f"{what}: dtype {dtype.name} cannot be sent (no MPI datatype for it)")


class ReduceOp:
    """The reductions (``torch.distributed.ReduceOp``). ``AVG`` is the sum divided by the world
    size (float dtypes only); ``BAND``/``BOR``/``BXOR`` take integer or bool tensors."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


REDUCTIONS = {
    ReduceOp.SUM: np.add,
    ReduceOp.AVG: np.add,
    ReduceOp.PRODUCT: np.multiply,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.BAND: np.bitwise_and,
    ReduceOp.BOR: np.bitwise_or,
    ReduceOp.BXOR: np.bitwise_xor,
}
BOOL_REDUCTIONS = {ReduceOp.SUM: np.logical_or, ReduceOp.MAX: np.logical_or, ReduceOp.BOR: np.logical_or}
BOOL_REDUCTIONS.update({ReduceOp.PRODUCT: np.logical_and, ReduceOp.MIN: np.logical_and, ReduceOp.BAND: np.logical_and})
BOOL_REDUCTIONS[ReduceOp.BXOR] = np.logical_xor


class Counted:
    """Adds a collective to ``lazyvic.metrics``: ``collectives`` (one), ``collective_bytes`` (the
    size of its buffers: an all-reduce counts its array twice, once per phase) and
    ``collective_seconds`` (MPI_Wtime from the request's start to its end, local reductions
    included)."""

    def __init__(self, nbytes: int):
        from mpi4py import MPI

        self.wtime = MPI.Wtime
        self.nbytes = nbytes
        self.start = self.wtime()

    def done(self) -> None:
        metrics.add("collectives")
        metrics.add("collective_bytes", self.nbytes)
        metrics.add("collective_seconds", self.wtime() - self.start)


class ArrayAllReduce:
    """One all-reduce of a flat array in three stages, so that several can be in flight:
    :meth:`start` posts the all-to-all of chunks, :meth:`reduce` waits for it, reduces this rank's
    chunk in rank order and posts the all-gather, :meth:`result` waits and returns the array.

    Args:
        g: the process group.
        flat: 1-D C-contiguous array of a wire dtype (not modified).
        op: a ReduceOp name; AVG divides by the world size (float dtypes).
        phases: 2 for an all-reduce, 1 for a reduce-scatter (the bytes counted).
    """

    def __init__(self, g: ProcessGroup, flat: np.ndarray, op: str, what: str, phases: int = 2):
        self.g, self.op, self.what = g, op, what
        self.n = flat.size
        MPI, types = mpi_types()
        self.mpi = types[flat.dtype]
        self.dtype = flat.dtype
        self.counted = Counted(phases * flat.nbytes)  # a reduce-scatter (scatter() alone): one phase
        size = g.size
        self.chunk = -(-self.n // size)
        if self.n == size * self.chunk:
            self.send = flat.reshape(size, self.chunk)
        else:
            self.send = np.zeros((size, self.chunk), dtype=flat.dtype)
            self.send.reshape(-1)[: self.n] = flat
        self.recv = self.mine = None
        self.gathered = None
        self.request = None

    def start(self) -> ArrayAllReduce:
        if self.g.size > 1 and self.n:
            self.recv = self.g.scratch.take(self.send.shape, self.dtype)
            self.request = self.g.comm.Ialltoall([self.send, self.mpi], [self.recv, self.mpi])
        return self

    def scatter(self) -> np.ndarray:
        """Wait for the all-to-all and return this rank's chunk reduced over the ranks in rank
        order (a reduce-scatter: the same bits on every rank and every run)."""
        g = self.g
        if g.size == 1 or not self.n:
            mine = self.send[0].copy()
        else:
            g.wait([self.request], self.what)
            reduce = (BOOL_REDUCTIONS if self.dtype == np.bool_ else REDUCTIONS)[self.op]
            recv = self.recv
            mine = self.mine = g.scratch.take((self.chunk,), self.dtype)
            reduce(recv[0], recv[1], out=mine)
            for r in range(2, g.size):
                reduce(mine, recv[r], out=mine)
            g.scratch.give(recv)
            self.recv = None
        if self.op == ReduceOp.AVG:
            np.divide(mine, self.dtype.type(g.size), out=mine)
        return mine

    def reduce(self) -> ArrayAllReduce:
        mine = self.scatter()
        if self.g.size == 1 or not self.n:
            self.gathered = mine
            return self
        self.gathered = np.empty_like(self.send)
        self.request = self.g.comm.Iallgather([mine, self.mpi], [self.gathered, self.mpi])
        return self

    def result(self) -> np.ndarray:
        if self.g.size > 1 and self.n:
            self.g.wait([self.request], self.what)
            self.g.scratch.give(self.mine)
            self.mine = None
        self.counted.done()
        return self.gathered.reshape(-1)[: self.n]


def post_broadcast(g: ProcessGroup, a: np.ndarray, src: int, what: str):
    """Post the broadcast of the C-contiguous wire-dtype array ``a`` from rank ``src`` (``a`` is
    overwritten on the other ranks); returns ``finish()``, which waits for it and counts it."""
    counted = Counted(a.nbytes)
    request = g.comm.Ibcast([a, mpi_types()[1][a.dtype]], root=src) if g.size > 1 and a.size else None

    def finish() -> None:
        if request is not None:
            g.wait([request], what)
        counted.done()

    return finish


def plan_transport(g: ProcessGroup):
    """``send(array, attrs) -> array``: how a plan's collective op (ops/collective.py) runs in
    group ``g``: the same rank-order all-reduce, or broadcast, as the functions here."""

    def send(a: np.ndarray, at: dict) -> np.ndarray:
        what = f"{at['collective']} (in a plan)"
        g.check(what)
        _, types = mpi_types()
        wire = a.dtype if a.dtype in types else np.dtype(np.float32)
        flat = np.ascontiguousarray(a, dtype=wire).reshape(-1)
        if at["collective"] == "broadcast":
            out = flat.copy()
            post_broadcast(g, out, at["src"], what)()
        else:
            out = ArrayAllReduce(g, flat, at["reduce"], what).start().reduce().result()
        return out.reshape(a.shape).astype(a.dtype, copy=False)

    return send
