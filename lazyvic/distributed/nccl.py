"""The ``"nccl"`` backend: collectives between the GPUs of a job through NCCL (CuPy's
``cupy.cuda.nccl``), with MPI beside it.

``init_process_group("nccl")`` starts the MPI group as the ``"mpi"`` backend does (the launcher,
the ranks, CPU tensors, objects and barriers go through MPI), then rank 0 makes an NCCL unique id,
MPI broadcasts it, and every rank joins one NCCL communicator on its GPU. A collective on a CUDA
tensor then never leaves the device: the tensor is computed (the sync point), NCCL reads its device
buffer and writes a new one on the CUDA stream lazyvic's kernels use (the legacy default stream,
so it runs after them), and the tensor is rebound to the result. CPU tensors in an ``"nccl"`` group
go through MPI, as PyTorch's ``"cpu:gloo,cuda:nccl"`` does.

GPUs: lazyvic runs one GPU per process. On a machine with several, a rank selects the GPU of its
local rank (``LOCAL_RANK`` modulo the number of GPUs) before its first CUDA allocation; NCCL
refuses two ranks on one GPU.

Order and bits: NCCL chooses its algorithm (ring or tree) and protocol by message size and
topology, so the sum's order is NCCL's, not the MPI backend's rank-order loop over the ranks;
whether a rerun repeats the bits is NCCL's to promise (it does for a fixed algorithm and
topology), not lazyvic's. Tested with one rank only (the one GPU lent so far).

dtypes: float16, bfloat16, float32, float64, int8, uint8, int32, int64, uint32, uint64 as they
are (float16 and bfloat16 are reduced in their own precision, as PyTorch's NCCL backend does);
bool as uint8 (sum, max and bor as logical or; product, min and band as logical and).
Reductions: sum, avg, product, min, max; NCCL has no bitwise reductions
(``UnsupportedOpError``, as PyTorch's).

Timeout: a collective is waited on with the group's deadline: NCCL's asynchronous errors are
checked while waiting, and a collective past the deadline aborts the communicator
(``ncclCommAbort``) and raises :class:`~lazyvic.errors.DistributedError`.

Reference: NCCL's API (``ncclAllReduce``, ``ncclBroadcast``, ``ncclAllGather``,
``ncclReduceScatter``, ``ncclCommInitRank``, ``ncclCommAbort``), as wrapped by CuPy.
"""

from __future__ import annotations

import os
import time

import numpy as np

from lazyvic import dtypes as _dtypes
from lazyvic.errors import DistributedError, DTypeError, UnsupportedOpError
from lazyvic.runtime import device as _dev
from lazyvic.runtime import metrics

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
SPIN_SECONDS = 0.005  # as ProcessGroup.wait: poll without sleeping this long, then 1 ms sleeps

_BITWISE = ("band", "bor", "bxor")


def require(what: str):
    """``cupy.cuda.nccl`` on a real GPU.

    Raises:
        DistributedError: no GPU, the simulator, no CuPy, or a CuPy built without NCCL.
    """
    if not _dev.cuda_available():
        raise DistributedError(f"{what}: the 'nccl' backend needs a GPU: {_dev.describe_cuda()}")
    cp = _dev.cupy()
    if cp is None:
        why = "Numba's CUDA simulator has no NCCL" if _dev.simulated() else "CuPy is not installed"
        raise DistributedError(
            f"{what}: the 'nccl' backend needs CuPy with NCCL on a real GPU ({why}); "
            f"pip install lazyvic[cuda], or use backend='mpi'"
        )
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        raise DistributedError(f"{what}: CuPy has no NCCL here ({e}); use backend='mpi'") from e
    if not getattr(nccl, "available", True):
        raise DistributedError(f"{what}: CuPy found no NCCL library; use backend='mpi'")
    return cp, nccl


def is_available() -> bool:
    """True when a real GPU, CuPy and its NCCL are there (the ``"nccl"`` backend can start)."""
    try:
        require("is_nccl_available")
    except DistributedError:
        return False
    return True


class NcclTransport:
    """One NCCL communicator over the ranks of MPI group ``g`` (one GPU per rank); ``share(a)``
    broadcasts uint8 array ``a`` from rank 0 in place (the NCCL id's way to the other ranks).

    Raises:
        DistributedError: NCCL is not available, or its communicator could not be made (for
            example two ranks on one GPU).
    """

    def __init__(self, g, share, what: str):
        cp, nccl = require(what)
        self.cp, self.nccl, self.g = cp, nccl, g
        self._select_gpu(cp)
        # Rank 0's unique id (128 bytes) to every rank: ``share(array)`` broadcasts it from rank 0
        # in place through MPI, with the group's deadline. CuPy gives the id as bytes (CuPy 14) or
        # as a tuple of 128 signed chars (earlier versions), and takes it back in the same form.
        own = nccl.get_unique_id()
        as_bytes = isinstance(own, (bytes, bytearray))
        raw = (
            np.frombuffer(bytes(own), np.uint8) if as_bytes else np.array(own, np.int64).astype(np.int8).view(np.uint8)
        )
        raw = raw.copy() if g.rank == 0 else np.zeros(UNIQUE_ID_BYTES, np.uint8)
        share(raw)
        uid = raw.tobytes() if as_bytes else tuple(int(v) for v in raw.view(np.int8))
        try:
            self.comm = nccl.NcclCommunicator(g.size, uid, g.rank)
        except nccl.NcclError as e:
            raise DistributedError(
                f"{what}: rank {g.rank} of {g.size} could not join the NCCL communicator ({e}); NCCL needs one "
                f"GPU per rank (on a machine with several, each local rank takes the GPU of its index)"
            ) from e
        self.types = {
            np.dtype(np.float32): nccl.NCCL_FLOAT32,
            np.dtype(np.float64): nccl.NCCL_FLOAT64,
            np.dtype(np.float16): nccl.NCCL_FLOAT16,
            np.dtype(np.int8): nccl.NCCL_INT8,
            np.dtype(np.uint8): nccl.NCCL_UINT8,
            np.dtype(np.int32): nccl.NCCL_INT32,
            np.dtype(np.int64): nccl.NCCL_INT64,
            np.dtype(np.uint32): nccl.NCCL_UINT32,
            np.dtype(np.uint64): nccl.NCCL_UINT64,
            np.dtype(np.bool_): nccl.NCCL_UINT8,
        }
        self.bf16 = nccl.NCCL_BFLOAT16
        self.ops = {
            "sum": nccl.NCCL_SUM,
            "avg": nccl.NCCL_AVG,
            "product": nccl.NCCL_PROD,
            "min": nccl.NCCL_MIN,
            "max": nccl.NCCL_MAX,
        }
        self.bool_ops = {"sum": nccl.NCCL_MAX, "max": nccl.NCCL_MAX, "bor": nccl.NCCL_MAX}
        self.bool_ops.update(product=nccl.NCCL_MIN, min=nccl.NCCL_MIN, band=nccl.NCCL_MIN)
        self.aborted = False

    def _select_gpu(self, cp) -> None:
        """A rank of a machine with several GPUs uses the GPU of its local rank."""
        count = cp.cuda.runtime.getDeviceCount()
        if count > 1:
            index = int(os.environ.get("LOCAL_RANK", "0")) % count
            cp.cuda.Device(index).use()
            from numba import cuda

            cuda.select_device(index)

    # -- the parts of one collective

    def datatype(self, dtype, what: str):
        """NCCL's datatype for a lazyvic dtype.

        Raises:
            DTypeError: NCCL has no such datatype (int16, uint16).
        """
        if dtype is _dtypes.bfloat16:
            return self.bf16
        t = self.types.get(np.dtype(dtype.np))
        if t is None:
            raise DTypeError(f"{what}: NCCL cannot send {dtype.name} tensors; use backend='mpi' for them")
        return t

    def op(self, name: str, dtype, what: str):
        """NCCL's reduction for a ReduceOp name (bool tensors: logical or / and on uint8).

        Raises:
            UnsupportedOpError: a bitwise reduction (NCCL has none), or xor of bool tensors.
        """
        if dtype is _dtypes.bool_:
            if name not in self.bool_ops:
                raise UnsupportedOpError(f"{what}: NCCL cannot reduce bool tensors with ReduceOp.{name.upper()}")
            return self.bool_ops[name]
        if name in _BITWISE:
            raise UnsupportedOpError(
                f"{what}: NCCL has no ReduceOp.{name.upper()} (no bitwise reductions); use backend='mpi'"
            )
        return self.ops[name]

    def flat(self, t, what: str):
        """``t`` computed now (the sync point) as its flat device array."""
        from lazyvic.sync import sync

        node = t._node
        if node.op != "buffer":
            sync(t)
            node = t._node
        if node.op == "scalar":  # a realized Python number: put it on the device
            return _dev.to_device(np.array(node.value, dtype=t.dtype.np))
        return _dev.storage(node.data)

    def run(self, launch, nbytes: int, what: str) -> None:
        """Launch one NCCL call (``launch(stream)``) and wait for it with the group's deadline.

        Raises:
            DistributedError: NCCL reported an error, or the deadline passed (the communicator is
                then aborted and the group broken).
        """
        g = self.g
        g.check(what)
        if self.aborted:
            raise DistributedError(f"{what}: the NCCL communicator was aborted by an earlier failure")
        start = time.perf_counter()
        stream = self.cp.cuda.Stream.null
        try:
            launch(stream.ptr)
        except self.nccl.NcclError as e:
            self._fail(f"{what}: NCCL failed on rank {g.rank} of {g.size}: {e}")
        event = self.cp.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        spin_until, deadline = start + SPIN_SECONDS, start + g.timeout
        while not event.done:
            try:
                self.comm.check_async_error()
            except self.nccl.NcclError as e:
                self._fail(f"{what}: NCCL failed on rank {g.rank} of {g.size}: {e}")
            now = time.perf_counter()
            if now > deadline:
                self._fail(
                    f"{what}: rank {g.rank} of {g.size} waited {g.timeout:g} s for the other ranks' GPUs "
                    f"(a rank died, is stuck, or called another collective in another order)"
                )
            if now < spin_until:
                os.sched_yield()
            else:
                time.sleep(0.001)
        metrics.add("collectives")
        metrics.add("collective_bytes", nbytes)
        metrics.add("collective_seconds", time.perf_counter() - start)

    def _fail(self, why: str):
        self.g.broken = why
        if not self.aborted:
            self.aborted = True
            try:
                self.comm.abort()
            except Exception:  # noqa: BLE001 - the error to report is the one above
                pass
        raise DistributedError(why)

    # -- the collectives (device arrays in, device arrays out)

    def all_reduce(self, x, dtype, op: str, what: str):
        out = self.cp.empty_like(x)
        kind, reduce = self.datatype(dtype, what), self.op(op, dtype, what)
        self.run(lambda s: self.comm.allReduce(x.data.ptr, out.data.ptr, x.size, kind, reduce, s), 2 * x.nbytes, what)
        return out

    def broadcast(self, x, dtype, src: int, what: str):
        out = self.cp.empty_like(x)
        kind = self.datatype(dtype, what)
        self.run(lambda s: self.comm.broadcast(x.data.ptr, out.data.ptr, x.size, kind, src, s), x.nbytes, what)
        return out

    def all_gather(self, x, dtype, what: str):
        out = self.cp.empty(self.g.size * x.size, dtype=x.dtype)
        kind = self.datatype(dtype, what)
        self.run(lambda s: self.comm.allGather(x.data.ptr, out.data.ptr, x.size, kind, s), out.nbytes, what)
        return out

    def reduce_scatter(self, x, dtype, op: str, what: str):
        """``x``: world size equal parts; returns this rank's part reduced over the ranks."""
        n = x.size // self.g.size
        out = self.cp.empty(n, dtype=x.dtype)
        kind, reduce = self.datatype(dtype, what), self.op(op, dtype, what)
        self.run(lambda s: self.comm.reduceScatter(x.data.ptr, out.data.ptr, n, kind, reduce, s), x.nbytes, what)
        return out

    def destroy(self) -> None:
        if not self.aborted:
            self.comm.destroy()
