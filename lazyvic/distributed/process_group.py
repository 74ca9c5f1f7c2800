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

from lazyvic.errors import ArgumentError, DistributedError, DTypeError
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
        rank, size: this process's rank in the group and the number of processes in it.
        ranks: the members' ranks in the default group, in group order (a subgroup of
            :func:`new_group`; the default group's are 0 .. size - 1).
        backend: the backend's name as given (``"mpi"``, ``"gloo"`` or ``"nccl"``).
        timeout: seconds a collective may wait for the other ranks.
    """

    def __init__(self, comm, backend: str, timeout: float, ranks: list | None = None):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.ranks = list(range(self.size)) if ranks is None else list(ranks)
        self.destroyed = False
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

    def group_rank(self, global_rank, what: str, arg: str) -> int:
        """The rank in this group of the process of rank ``global_rank`` in the default group.

        Raises:
            ArgumentError: not an integer, or not a member of this group.
        """
        if isinstance(global_rank, (int, np.integer)) and int(global_rank) in self.ranks:
            return self.ranks.index(int(global_rank))
        raise ArgumentError(f"{what}: {arg}={global_rank!r} is not a rank of this group (its ranks: {self.ranks})")

    def __repr__(self) -> str:
        return f"ProcessGroup(backend={self.backend!r}, ranks={self.ranks}, rank={self.rank})"

    def check(self, what: str) -> None:
        if self.destroyed:
            raise DistributedError(f"{what}: the process group {self.ranks} was destroyed (destroy_process_group)")
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
            _attach_nccl(group, what)
        _install_abort_on_error()
        _collective_op.transports[group.key] = plan_transport(group)
        _default = group


def _attach_nccl(g: ProcessGroup, what: str) -> None:
    """Give the members of ``g`` their NCCL communicator (rank 0's id broadcast through ``g``'s
    MPI communicator), or free that communicator and raise.

    Raises:
        DistributedError: NCCL could not start (see lazyvic/distributed/nccl.py).
    """
    from lazyvic.distributed.nccl import NcclTransport

    try:
        g.nccl = NcclTransport(g, lambda a: post_broadcast(g, a, 0, what)(), what)
    except DistributedError:
        g.comm.Free()
        raise


def node_ranks(comm) -> tuple[int, int]:
    """(rank among the processes of this machine, their number) in the communicator ``comm``."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    ranks = local.Get_rank(), local.Get_size()
    local.Free()
    return ranks


def destroy_process_group(group=None) -> None:
    """Leave a process group (``torch.distributed.destroy_process_group``): ``None`` (or
    ``group.WORLD``) ends the default group and every subgroup, and a later
    :func:`init_process_group` joins again; a subgroup of :func:`new_group` ends that group (not a
    collective). Without a call, MPI is finalized at exit."""
    global _default
    with _lock:
        if isinstance(group, ProcessGroup) and group is not _default:
            _free(group)
            if group in _subgroups:
                _subgroups.remove(group)
            return
        if _default is None:
            return
        for g in [*_subgroups, _default]:
            _free(g)
        _subgroups.clear()
        _default = None


def _free(g: ProcessGroup) -> None:
    if g.destroyed:
        return
    g.destroyed = True
    _collective_op.transports.pop(g.key, None)
    if g.nccl is not None:
        g.nccl.destroy()
    if g.broken is None:
        g.comm.Free()


class _NonMember:
    """What :func:`new_group` returns on a process that is not a member
    (``torch.distributed.GroupMember.NON_GROUP_MEMBER``): a collective given it does nothing and
    returns None, :func:`get_rank` and :func:`get_world_size` give -1."""

    def __repr__(self) -> str:
        return "GroupMember.NON_GROUP_MEMBER"


NON_GROUP_MEMBER = _NonMember()
_subgroups: list = []


def new_group(
    ranks=None,
    timeout: datetime.timedelta | float | None = None,
    backend: str | None = None,
    pg_options=None,
    use_local_synchronization: bool = False,
    group_desc: str | None = None,
    device_id=None,
):
    """A process group of some of the default group's processes (``torch.distributed.new_group``).

    Every process of the default group must call it, with the same ``ranks``, in the same order
    as its other ``new_group`` calls (it is a collective of the default group; the processes wait
    for each other with its deadline). Collectives given the group run among its members; their
    ``src``/``dst`` arguments are ranks in the default group, their ``group_src``/``group_dst``
    arguments ranks in the group, as in PyTorch.

    Args:
        ranks: the default group's ranks of the members (default: all); their order does not
            matter, the group's ranks follow the default group's order.
        timeout: the group's deadline (default: the default group's).
        backend: ``"mpi"``, ``"gloo"`` or ``"nccl"`` (default: the default group's).
        pg_options, use_local_synchronization, group_desc, device_id: accepted for
            compatibility, not used.

    Returns:
        The :class:`ProcessGroup` on a member, :data:`NON_GROUP_MEMBER` on the other processes.

    Raises:
        DistributedError: no default group; a process did not call it within the deadline.
        ArgumentError: a rank out of range or repeated; an unknown backend.
    """
    what = "new_group"
    parent = default_group(what)
    if ranks is None:
        members = list(range(parent.size))
    else:
        members = sorted(int(r) for r in ranks)
        bad = [r for r in members if not 0 <= r < parent.size]
        if bad or len(set(members)) != len(members):
            raise ArgumentError(
                f"{what}: ranks must be distinct ranks of the default group (0 .. {parent.size - 1}), got {list(ranks)}"
            )
    name = (backend or parent.backend).lower()
    if name not in BACKENDS:
        raise ArgumentError(f"{what}: unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    seconds = parent.timeout if timeout is None else _seconds(timeout, what)
    from mpi4py import MPI

    parent.wait([parent.comm.Ibarrier()], what)  # every process is here: the split below does not hang
    member = parent.rank in members
    comm = parent.comm.Split(0 if member else MPI.UNDEFINED, key=parent.rank)
    if not member:
        return NON_GROUP_MEMBER
    g = ProcessGroup(comm, name, seconds, members)
    if name == "nccl":
        _attach_nccl(g, what)
    with _lock:
        _collective_op.transports[g.key] = plan_transport(g)
        _subgroups.append(g)
    return g


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


def group_of(group, what: str) -> ProcessGroup | None:
    """The group a collective runs in: ``None`` or ``group.WORLD`` mean the default one, a
    :class:`ProcessGroup` of :func:`new_group` itself; None for :data:`NON_GROUP_MEMBER` (the
    caller does nothing, as PyTorch).

    Raises:
        DistributedError: no default group; the group was destroyed or broken.
        TypeError: ``group`` is not a process group.
    """
    if group is None or group is WORLD:
        return default_group(what)
    if group is NON_GROUP_MEMBER:
        return None
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"{what}: group must be a ProcessGroup from new_group, or group.WORLD, got {group!r}")
    group.check(what)
    return group


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (default: the default group), 0 .. size - 1; -1 for a
    group it is not a member of (:data:`NON_GROUP_MEMBER`).

    Raises:
        DistributedError: :func:`init_process_group` was not called.
    """
    g = group_of(group, "get_rank")
    return -1 if g is None else g.rank


def get_world_size(group=None) -> int:
    """The number of processes in ``group`` (default: the default group); -1 for a group this
    process is not a member of.

    Raises:
        DistributedError: :func:`init_process_group` was not called.
    """
    g = group_of(group, "get_world_size")
    return -1 if g is None else g.size


def get_backend(group=None) -> str:
    """The group's backend name (``"mpi"``, ``"gloo"`` or ``"nccl"``)."""
    g = group_of(group, "get_backend")
    if g is None:
        raise DistributedError("get_backend: this process is not a member of the group")
    return g.backend


def get_process_group_ranks(group) -> list[int]:
    """The default group's ranks of ``group``'s members, in group order."""
    g = group_of(group, "get_process_group_ranks")
    if g is None:
        raise DistributedError("get_process_group_ranks: this process is not a member of the group")
    return list(g.ranks)


def get_global_rank(group, group_rank: int) -> int:
    """The default group's rank of the member of rank ``group_rank`` in ``group``.

    Raises:
        ArgumentError: ``group_rank`` is not a rank of the group.
    """
    ranks = get_process_group_ranks(group)
    if not isinstance(group_rank, (int, np.integer)) or not 0 <= int(group_rank) < len(ranks):
        raise ArgumentError(f"get_global_rank: {group_rank!r} is not a rank of a group of {len(ranks)}")
    return ranks[int(group_rank)]


def get_group_rank(group, global_rank: int) -> int:
    """The rank in ``group`` of the default group's rank ``global_rank``.

    Raises:
        ArgumentError: that process is not a member of the group.
    """
    g = group_of(group, "get_group_rank")
    if g is None:
        raise DistributedError("get_group_rank: this process is not a member of the group")
    return g.group_rank(global_rank, "get_group_rank", "global_rank")


class _World:
    """``torch.distributed.group.WORLD``: a name for the default group."""

    def __repr__(self) -> str:
        return "group.WORLD"


WORLD = _World()


class group:  # noqa: N801 (PyTorch's name: torch.distributed.group.WORLD)
    """``group.WORLD`` names the default process group."""

    WORLD = WORLD


class GroupMember:
    """``torch.distributed.GroupMember``: ``WORLD`` and ``NON_GROUP_MEMBER``."""

    WORLD = WORLD
    NON_GROUP_MEMBER = NON_GROUP_MEMBER


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
