"""Collectives on tensors (``torch.distributed``'s names and in-place contract).

A collective is a sync point of its own kind: the tensors it reads are computed first (the
trace is cut before it; ``lazyvic.explain`` shows the cut as ``collective <name>``), the
messages go through MPI, and the result becomes the tensor's new value, a realized buffer that
the next trace reads. Every rank must call the same collectives in the same order, as in
PyTorch.

Reductions have one fixed order, so a seeded run gives the same bits every time and on every
rank: each rank's tensor is cut into ``world_size`` chunks, chunk ``k`` of every rank is sent to
rank ``k`` (``MPI_Ialltoall``), which reduces them in rank order (rank 0's, then rank 1's ...),
and the reduced chunks are gathered back to every rank (``MPI_Iallgather``). That is the
bandwidth of a ring all-reduce (each rank sends and receives ``2 (n - 1) / n`` of the tensor),
and the sum of rank order is what a serial loop over the ranks' values computes.

dtypes: float32, float64 and the integer and bool dtypes travel as they are; float16 and
bfloat16 are widened to float32 for the transport and the reduction, and rounded once at the
end (PyTorch's NCCL reduces them in their own precision).

In an ``"nccl"`` group, a collective whose tensors are all on ``"cuda"`` goes through NCCL
instead, GPU to GPU, in NCCL's order (lazyvic/distributed/nccl.py); any other call goes through
MPI as above (a CUDA tensor through host memory), and its result stays on the tensor's device.
"""

from __future__ import annotations

import pickle

import numpy as np

from lazyvic import modes
from lazyvic.distributed.process_group import (
    REDUCTIONS,
    ArrayAllReduce,
    Counted,
    ProcessGroup,
    ReduceOp,
    group_of,
    mpi_types,
    post_broadcast,
    wire_dtype,
)
from lazyvic.errors import ArgumentError, DistributedError, DTypeError, ShapeError
from lazyvic.runtime import device as _dev
from lazyvic.tensor import Tensor
from lazyvic.trace.node import Node


def _op_name(op, dtype, what: str) -> str:
    """The ReduceOp name of ``op``, checked against the tensor's dtype.

    Raises:
        ArgumentError: an unknown op.
        DTypeError: ``AVG`` of an integer tensor; a bitwise op on a float tensor.
    """
    name = getattr(op, "name", op)  # an enum-like value from user code
    name = str(name).lower().rsplit(".", 1)[-1]
    if name not in REDUCTIONS:
        raise ArgumentError(
            f"unknown reduce op {op!r}; expected one of {', '.join(REDUCTIONS)} (lazyvic.distributed.ReduceOp)"
        )
    if name == ReduceOp.AVG and not dtype.is_floating_point:
        raise DTypeError(f"{what}: ReduceOp.AVG needs a floating tensor, got {dtype.name}")
    if name in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and dtype.is_floating_point:
        raise DTypeError(f"{what}: ReduceOp.{name.upper()} needs an integer or bool tensor, got {dtype.name}")
    return name


def _check_list(tensors: list, shape: tuple, g: ProcessGroup, what: str, arg: str, of: str) -> None:
    """``tensors`` holds world-size tensors of ``shape`` (``of`` names where the shape comes from)."""
    if len(tensors) != g.size:
        raise ShapeError(f"{what}: {arg} has {len(tensors)} tensors, expected the world size {g.size}")
    for k, t in enumerate(tensors):
        _check_tensor(t, what, f"{arg}[{k}]")
        if t.shape != shape:
            raise ShapeError(f"{what}: {arg}[{k}] has shape {t.shape}, expected {of} {shape}")


def _check_tensor(t, what: str, arg: str = "tensor") -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: {arg} must be a lazyvic Tensor, got {type(t).__name__}")


class _Transport:
    """How a tensor's values travel: (wire dtype, MPI datatype)."""

    def __init__(self, dtype, what: str):
        _, types = mpi_types()
        self.wire = wire_dtype(dtype, what)
        self.mpi = types[self.wire]
        self.dtype = dtype

    def host(self, t: Tensor) -> np.ndarray:
        """``t``'s values (computed now: the sync point) as a C-contiguous wire-dtype array."""
        return np.ascontiguousarray(np.asarray(t.numpy()), dtype=self.wire)


def value_node(values, like: Tensor) -> Node:
    """A buffer node of ``values`` with ``like``'s shape, dtype and device: a host array (copied
    to the device for a CUDA tensor), or a flat device array (NCCL's result) for a CUDA tensor."""
    if like.is_cuda and hasattr(values, "__cuda_array_interface__"):  # already on the device
        return Node.buffer(_dev.storage(values), like.dtype, "cuda", like.shape)
    # (np.ascontiguousarray makes a 0-d array 1-d: reshape after it)
    values = np.ascontiguousarray(np.asarray(values).astype(like.dtype.np, copy=False)).reshape(like.shape)
    if like.is_cuda:
        return Node.buffer(_dev.to_device(values), like.dtype, "cuda", like.shape)
    return Node.buffer(values, like.dtype)


def rebind(t: Tensor, values) -> None:
    """Make ``t`` hold ``values`` in place (its own device and dtype), with no autograd history:
    a collective's result is data, as in PyTorch."""
    with modes.no_grad():
        t._assign(Tensor._wrap(value_node(values, t)))


def _on_nccl(g: ProcessGroup, *tensors) -> bool:
    """The call goes through NCCL: an ``"nccl"`` group and every tensor on ``"cuda"``."""
    return g.nccl is not None and all(t.is_cuda for t in tensors)


class Work:
    """What a collective called with ``async_op=True`` returns (``torch.distributed.Work``):
    :meth:`wait` finishes it (the tensors hold the result after); :meth:`is_completed`."""

    def __init__(self, finish):
        self._finish = finish
        self._done = False
        self.source = None  # the sender's rank, for a receive

    def source_rank(self) -> int:
        """The rank a finished receive (``irecv``) got its message from."""
        if self.source is None:
            raise RuntimeError("source_rank: this Work is not a finished receive")
        return self.source

    def wait(self, timeout=None) -> bool:
        if not self._done:
            self._finish()
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done


def _run(finish, async_op: bool):
    if async_op:
        return Work(finish)
    finish()
    return None


def all_reduce(tensor: Tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` over all ranks; every rank's ``tensor`` holds the result
    (``torch.distributed.all_reduce``). Same shape and dtype on every rank.

    Sum, product, min and max are taken in rank order (see the module docstring): the same bits
    on every rank and every run.

    Returns:
        None, or a :class:`Work` with ``async_op=True`` (the reduction is already in flight).

    Raises:
        DistributedError: no process group; the other ranks did not answer within the timeout.
        DTypeError: ``AVG`` of an integer tensor; a bitwise op on a float tensor.
    """
    what = "all_reduce"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    name = _op_name(op, tensor.dtype, what)
    if _on_nccl(g, tensor):
        out = g.nccl.all_reduce(g.nccl.flat(tensor, what), tensor.dtype, name, what)
        return _run(lambda: rebind(tensor, out), async_op)
    wire = _Transport(tensor.dtype, what)
    job = ArrayAllReduce(g, wire.host(tensor).reshape(-1), name, what).start().reduce()
    return _run(lambda: rebind(tensor, job.result()), async_op)


def broadcast(tensor: Tensor, src: int, group=None, async_op: bool = False, group_src=None):
    """Every rank's ``tensor`` takes rank ``src``'s values (``torch.distributed.broadcast``).

    Raises:
        ArgumentError: ``src`` is not a rank.
        DistributedError: no process group; the timeout passed.
    """
    what = "broadcast"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    src = _src(g, src, what, group_src)
    if _on_nccl(g, tensor):
        out = g.nccl.broadcast(g.nccl.flat(tensor, what), tensor.dtype, src, what)
        return _run(lambda: rebind(tensor, out), async_op)
    a = _Transport(tensor.dtype, what).host(tensor).copy()
    sent = post_broadcast(g, a, src, what)

    def finish():
        sent()
        if g.rank != src:
            rebind(tensor, a)

    return _run(finish, async_op)


def broadcast_flat(g: ProcessGroup, tensors: list, src: int, what: str) -> None:
    """Every rank's ``tensors`` take rank ``src``'s values: one broadcast per wire dtype of all
    the tensors packed into one flat array (``DistributedDataParallel``'s parameters and
    buffers). The ranks must hold tensors of the same shapes, in the same order."""
    if g.size == 1 or not tensors:
        return
    by_wire: dict = {}
    for t in tensors:
        by_wire.setdefault(wire_dtype(t.dtype, what), []).append(t)
    for wire, group in by_wire.items():
        flat = np.concatenate([np.asarray(t.numpy(), dtype=wire).reshape(-1) for t in group])
        post_broadcast(g, flat, src, what)()
        if g.rank != src:
            offset = 0
            for t in group:
                n = t.numel()
                rebind(t, flat[offset : offset + n])
                offset += n


def traced(tensor: Tensor, collective: str, op: str = ReduceOp.SUM, src: int = 0, after=(), group=None) -> Tensor:
    """A new tensor: the all-reduce (``collective="all_reduce"``, ``op``) or broadcast (from
    ``src``) of ``tensor``, recorded as a node of the trace (ops/collective.py) instead of run now.
    ``after``: earlier traced collectives that must run first (every rank runs them in one order).
    What a captured training step records (``DistributedDataParallel``)."""
    g = group_of(group, collective)
    return Tensor.apply("collective", tensor, *after, collective=collective, reduce=op, src=src, group=g.key)


def _src(g: ProcessGroup, src, what: str, group_src=None, arg: str = "src") -> int:
    """The rank in ``g`` of a collective's root: ``group_src`` (a rank in ``g``) when given, else
    ``src`` (a rank in the default group, as PyTorch's).

    Raises:
        ArgumentError: not a rank of the group.
    """
    if group_src is not None:
        if not isinstance(group_src, (int, np.integer)) or not 0 <= int(group_src) < g.size:
            raise ArgumentError(f"{what}: group_{arg}={group_src!r} is not a rank of a group of {g.size}")
        return int(group_src)
    return g.group_rank(src, what, arg)


def _gather(g: ProcessGroup, a: np.ndarray, mpi, what: str) -> np.ndarray:
    """(world size, *a.shape): every rank's ``a``, in rank order."""
    out = np.empty((g.size, *a.shape), dtype=a.dtype)
    counted = Counted(out.nbytes)
    if g.size == 1 or not a.size:
        out[:] = a
    else:
        g.wait([g.comm.Iallgather([a, mpi], [out, mpi])], what)
    counted.done()
    return out


def all_gather(tensor_list: list, tensor: Tensor, group=None, async_op: bool = False):
    """``tensor_list[r]`` takes rank ``r``'s ``tensor`` (``torch.distributed.all_gather``).

    Raises:
        ShapeError: ``tensor_list`` does not hold world-size tensors of ``tensor``'s shape.
    """
    what = "all_gather"
    _check_tensor(tensor, what)
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    _check_list(tensor_list, tensor.shape, g, what, "tensor_list", "the input's")
    if _on_nccl(g, tensor, *tensor_list):
        out = g.nccl.all_gather(g.nccl.flat(tensor, what), tensor.dtype, what).reshape(g.size, -1)
    else:
        wire = _Transport(tensor.dtype, what)
        out = _gather(g, wire.host(tensor), wire.mpi, what)

    def finish():
        for t, values in zip(tensor_list, out):
            rebind(t, values)

    return _run(finish, async_op)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group=None, async_op: bool = False):
    """``output_tensor`` (world size times ``input_tensor``'s elements, e.g. its shape with the
    first dim multiplied) takes every rank's input in rank order
    (``torch.distributed.all_gather_into_tensor``).

    Raises:
        ShapeError: the output does not hold world size times the input's elements.
    """
    what = "all_gather_into_tensor"
    _check_tensor(output_tensor, what, "output_tensor")
    _check_tensor(input_tensor, what, "input_tensor")
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    if output_tensor.numel() != g.size * input_tensor.numel():
        raise ShapeError(
            f"{what}: output_tensor has shape {output_tensor.shape}, expected {g.size} x the input's "
            f"{input_tensor.shape} elements"
        )
    if _on_nccl(g, output_tensor, input_tensor):
        out = g.nccl.all_gather(g.nccl.flat(input_tensor, what), input_tensor.dtype, what)
    else:
        wire = _Transport(input_tensor.dtype, what)
        out = _gather(g, wire.host(input_tensor), wire.mpi, what)
    return _run(lambda: rebind(output_tensor, out), async_op)


def _reduce_scatter(g: ProcessGroup, rows: np.ndarray, op: str, what: str) -> np.ndarray:
    """rows: (world size, m) of this rank; returns rank ``me``'s (m,) = reduce over ranks of
    their row ``me``, in rank order (the first half of the all-reduce)."""
    job = ArrayAllReduce(g, np.ascontiguousarray(rows).reshape(-1), op, what, phases=1).start()
    mine = job.scatter()
    job.counted.done()
    return mine


def reduce_scatter(output: Tensor, input_list: list, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """``output`` on rank ``r`` takes the reduction over ranks of their ``input_list[r]``
    (``torch.distributed.reduce_scatter``), in rank order.

    Raises:
        ShapeError: ``input_list`` does not hold world-size tensors of ``output``'s shape.
    """
    what = "reduce_scatter"
    _check_tensor(output, what, "output")
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    name = _op_name(op, output.dtype, what)
    _check_list(input_list, output.shape, g, what, "input_list", "the output's")
    if _on_nccl(g, output, *input_list):
        rows = g.nccl.cp.concatenate([g.nccl.flat(t, what) for t in input_list])
        mine = g.nccl.reduce_scatter(rows, output.dtype, name, what)
    else:
        wire = _Transport(output.dtype, what)
        rows = np.stack([wire.host(t).reshape(-1) for t in input_list])
        mine = _reduce_scatter(g, rows, name, what)
    return _run(lambda: rebind(output, mine), async_op)


def reduce_scatter_tensor(output: Tensor, input: Tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """``output`` on rank ``r`` takes the reduction over ranks of the ``r``-th of ``input``'s
    world-size equal parts (in C order) (``torch.distributed.reduce_scatter_tensor``).

    Raises:
        ShapeError: ``input`` does not hold world size times ``output``'s elements.
    """
    what = "reduce_scatter_tensor"
    _check_tensor(output, what, "output")
    _check_tensor(input, what, "input")
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    name = _op_name(op, input.dtype, what)
    if input.numel() != g.size * output.numel():
        raise ShapeError(
            f"{what}: input has shape {input.shape}, expected {g.size} x the output's {output.shape} elements"
        )
    if _on_nccl(g, output, input):
        mine = g.nccl.reduce_scatter(g.nccl.flat(input, what), input.dtype, name, what)
    else:
        wire = _Transport(input.dtype, what)
        mine = _reduce_scatter(g, wire.host(input).reshape(g.size, -1), name, what)
    return _run(lambda: rebind(output, mine), async_op)


def barrier(group=None, async_op: bool = False, device_ids=None):
    """Wait until every rank has called ``barrier`` (``torch.distributed.barrier``).

    Raises:
        DistributedError: no process group; the timeout passed.
    """
    what = "barrier"
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    req = g.comm.Ibarrier() if g.size > 1 else None

    def finish():
        if req is not None:
            g.wait([req], what)

    return _run(finish, async_op)


def _all_bytes(g: ProcessGroup, payload: bytes, what: str) -> list[bytes]:
    MPI, _ = mpi_types()
    sizes = _gather(g, np.array([len(payload)], dtype=np.int64), MPI.INT64_T, what)[:, 0]
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    if g.size == 1:
        out[:] = np.frombuffer(payload, dtype=np.uint8)
    else:
        send = np.frombuffer(payload, dtype=np.uint8)
        counts = [int(s) for s in sizes]
        displs = [int(d) for d in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
        g.wait([g.comm.Iallgatherv([send, MPI.BYTE], [out, (counts, displs), MPI.BYTE])], what)
    ends = np.cumsum(sizes)
    return [out[e - s : e].tobytes() for s, e in zip(sizes, ends)]


def all_gather_object(object_list: list, obj, group=None) -> None:
    """``object_list[r]`` takes rank ``r``'s ``obj`` (pickled; ``torch.distributed.all_gather_object``).
    Only for objects the ranks trust: unpickling runs code.

    Raises:
        ShapeError: ``object_list`` is not world-size long.
    """
    what = "all_gather_object"
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    if len(object_list) != g.size:
        raise ShapeError(f"{what}: object_list has {len(object_list)} entries, expected the world size {g.size}")
    for r, payload in enumerate(_all_bytes(g, pickle.dumps(obj), what)):
        object_list[r] = pickle.loads(payload)


def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None) -> None:
    """Every rank's ``object_list`` takes rank ``src``'s entries (pickled; the lists must have
    one length; ``torch.distributed.broadcast_object_list``). Only for objects the ranks trust.

    Raises:
        ArgumentError: ``src`` is not a rank.
    """
    what = "broadcast_object_list"
    g = group_of(group, what)
    if g is None:  # not a member of the group: nothing to do (PyTorch's behavior)
        return None
    src = _src(g, src, what)
    payloads = _all_bytes(g, pickle.dumps(list(object_list)) if g.rank == src else b"", what)
    values = pickle.loads(payloads[src])
    if len(values) != len(object_list):
        raise DistributedError(
            f"{what}: rank {src} sent {len(values)} objects, rank {g.rank}'s object_list has {len(object_list)}"
        )
    object_list[:] = values
