"""Collectives with a root (``reduce``, ``gather``, ``scatter``) and point-to-point messages
(``send``, ``recv``, ``isend``, ``irecv``), with ``torch.distributed``'s names and contracts.

They go through MPI in every backend (a CUDA tensor through host memory; its result comes back
to the device), waited on with the group's deadline as the other collectives are
(:class:`~lazyvic.errors.DistributedError` past it). Each is a sync point: the tensors it reads
are computed first, and a tensor it writes is rebound to the received values, with no autograd
history.

``reduce`` reduces in rank order, as ``all_reduce`` does (the destination gets the same bits
``all_reduce`` would give every rank); the other ranks' tensors are left as they were.
"""

from __future__ import annotations

import numpy as np

from lazyvic.distributed.collectives import (
    Work,
    _check_list,
    _check_tensor,
    _op_name,
    _run,
    _src,
    _Transport,
    rebind,
)
from lazyvic.distributed.process_group import ArrayAllReduce, Counted, ReduceOp, group_of
from lazyvic.errors import ArgumentError, ShapeError


def reduce(tensor, dst: int, op=ReduceOp.SUM, group=None, async_op: bool = False, group_dst=None):
    """Reduce ``tensor`` over all ranks into rank ``dst``'s ``tensor`` (``torch.distributed.reduce``);
    the other ranks' tensors are unchanged. Sum, product, min and max in rank order.

    Raises:
        ArgumentError: ``dst`` is not a rank.
        DTypeError: ``AVG`` of an integer tensor; a bitwise op on a float tensor.
        DistributedError: no process group; the timeout passed.
    """
    what = "reduce"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    dst = _src(g, dst, what, group_dst, "dst")
    name = _op_name(op, tensor.dtype, what)
    wire = _Transport(tensor.dtype, what)
    job = ArrayAllReduce(g, wire.host(tensor).reshape(-1), name, what).start().reduce()

    def finish():
        values = job.result()
        if g.rank == dst:
            rebind(tensor, values)

    return _run(finish, async_op)


def gather(tensor, gather_list=None, dst: int = 0, group=None, async_op: bool = False, group_dst=None):
    """Rank ``dst``'s ``gather_list[r]`` takes rank ``r``'s ``tensor`` (``torch.distributed.gather``).

    Args:
        gather_list: on ``dst``, world-size tensors of ``tensor``'s shape; on the other ranks
            ``None`` (or an empty list).

    Raises:
        ShapeError: ``gather_list`` on ``dst`` does not hold world-size tensors of the shape.
        ArgumentError: ``dst`` is not a rank; a ``gather_list`` given on another rank.
    """
    what = "gather"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    dst = _src(g, dst, what, group_dst, "dst")
    gather_list = _root_list(g, dst, gather_list, tensor.shape, what, "gather_list", "destination")
    wire = _Transport(tensor.dtype, what)
    a = wire.host(tensor)
    out = np.empty((g.size, *a.shape), dtype=a.dtype) if g.rank == dst else None
    counted = Counted(a.nbytes * (g.size if g.rank == dst else 1))
    if g.size == 1:
        out[0] = a
    else:
        recv = [out, wire.mpi] if out is not None else None
        g.wait([g.comm.Igather([a, wire.mpi], recv, root=dst)], what)
    counted.done()

    def finish():
        if out is not None:
            for t, values in zip(gather_list, out):
                rebind(t, values)

    return _run(finish, async_op)


def scatter(tensor, scatter_list=None, src: int = 0, group=None, async_op: bool = False, group_src=None):
    """Every rank ``r``'s ``tensor`` takes rank ``src``'s ``scatter_list[r]``
    (``torch.distributed.scatter``).

    Args:
        scatter_list: on ``src``, world-size tensors of ``tensor``'s shape; on the other ranks
            ``None`` (or an empty list).

    Raises:
        ShapeError: ``scatter_list`` on ``src`` does not hold world-size tensors of the shape.
        ArgumentError: ``src`` is not a rank; a ``scatter_list`` given on another rank.
    """
    what = "scatter"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    src = _src(g, src, what, group_src)
    wire = _Transport(tensor.dtype, what)
    scatter_list = _root_list(g, src, scatter_list, tensor.shape, what, "scatter_list", "source")
    rows = np.stack([wire.host(t) for t in scatter_list]) if scatter_list else None
    mine = np.empty(tensor.shape, dtype=wire.wire)
    counted = Counted(mine.nbytes * (g.size if g.rank == src else 1))
    if g.size == 1:
        mine[...] = rows[0]
    else:
        send = [np.ascontiguousarray(rows), wire.mpi] if g.rank == src else None
        g.wait([g.comm.Iscatter(send, [mine, wire.mpi], root=src)], what)
    counted.done()
    return _run(lambda: rebind(tensor, mine), async_op)


def _root_list(g, root: int, tensors, shape: tuple, what: str, arg: str, role: str) -> list | None:
    """A rooted collective's list: on the root, ``tensors`` checked (world-size tensors of
    ``shape``); None on the other ranks, which must not give one.

    Raises:
        ShapeError: the root's list has another length or shape.
        ArgumentError: a list given on another rank.
    """
    if g.rank == root:
        tensors = list(tensors) if tensors is not None else []
        _check_list(tensors, shape, g, what, arg, "the tensor's")
        return tensors
    if tensors:
        raise ArgumentError(
            f"{what}: {arg} must be given on the {role} rank {g.ranks[root]} only (this is rank {g.ranks[g.rank]})"
        )
    return None


def _peer(g, rank, what: str, arg: str, group_rank=None) -> int:
    """The rank in ``g`` of the other end of a message (``rank`` in the default group, or
    ``group_rank`` in ``g``)."""
    peer = _src(g, rank, what, group_rank, arg)
    if peer == g.rank:
        raise ArgumentError(f"{what}: {arg}={rank if group_rank is None else group_rank} is this process's own rank")
    return peer


def isend(tensor, dst: int, group=None, tag: int = 0, group_dst=None) -> Work:
    """Send ``tensor``'s values to rank ``dst`` without waiting (``torch.distributed.isend``);
    ``Work.wait()`` waits for the send. The values are taken now (the sync point).

    Raises:
        ArgumentError: ``dst`` is not another rank.
    """
    what = "isend"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    dst = _peer(g, dst, what, "dst", group_dst)
    wire = _Transport(tensor.dtype, what)
    a = wire.host(tensor).copy()  # owned until the send completes
    counted = Counted(a.nbytes)
    request = g.comm.Isend([a, wire.mpi], dest=dst, tag=int(tag))

    def finish():
        g.wait([request], what)
        counted.done()

    work = Work(finish)
    work.buffer = a  # the send's memory lives as long as its Work
    return work


def irecv(tensor, src: int | None = None, group=None, tag: int = 0, group_src=None) -> Work:
    """Receive into ``tensor`` from rank ``src`` (any rank when ``None``) without waiting
    (``torch.distributed.irecv``); after ``Work.wait()`` the tensor holds the values, and
    ``Work.source_rank()`` names the sender.

    Raises:
        ArgumentError: ``src`` is not another rank.
        DistributedError: the timeout passed; the message was not of ``tensor``'s size.
    """
    what = "irecv"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    from mpi4py import MPI

    if src is None and group_src is None:
        peer = MPI.ANY_SOURCE
    else:
        peer = _peer(g, src, what, "src", group_src)
    wire = _Transport(tensor.dtype, what)
    buf = np.empty(tensor.shape, dtype=wire.wire)
    counted = Counted(buf.nbytes)
    status = MPI.Status()
    request = g.comm.Irecv([buf, wire.mpi], source=peer, tag=int(tag))
    work = Work(None)

    def finish():
        try:
            g.wait([request], what, [status])
        except MPI.Exception as e:
            code = e.Get_error_class()
            if code == MPI.ERR_IN_STATUS:  # (MPI_Testall reports the request's error in its status)
                code = MPI.Get_error_class(status.Get_error())
            if code != MPI.ERR_TRUNCATE:
                raise
            raise ShapeError(
                f"{what}: a rank sent more elements than tensor has ({buf.size}, shape {tuple(tensor.shape)})"
            ) from None
        count = status.Get_count(wire.mpi)
        if count != buf.size:
            raise ShapeError(
                f"{what}: rank {status.Get_source()} sent {count} elements, tensor has {buf.size} {tuple(tensor.shape)}"
            )
        counted.done()
        work.source = g.ranks[status.Get_source()]  # the sender's rank in the default group
        rebind(tensor, buf)

    work._finish = finish
    return work


def send(tensor, dst: int, group=None, tag: int = 0, group_dst=None) -> None:
    """Send ``tensor``'s values to rank ``dst`` and wait until they are sent
    (``torch.distributed.send``). See :func:`isend`."""
    isend(tensor, dst, group, tag, group_dst).wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0, group_src=None) -> int:
    """Receive into ``tensor`` from rank ``src`` (any rank when ``None``) and return the sender's
    rank (``torch.distributed.recv``). See :func:`irecv`."""
    work = irecv(tensor, src, group, tag, group_src)
    work.wait()
    return work.source
