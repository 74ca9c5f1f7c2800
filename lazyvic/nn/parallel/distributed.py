"""``DistributedDataParallel``: one model replica per process, gradients averaged after backward.

PyTorch's design (``torch/nn/parallel/distributed.py`` and its C++ ``Reducer``), on lazyvic's
engine:

- At wrap time every rank checks that all ranks hold the same parameters (names, shapes,
  dtypes; a mismatch raises on every rank, naming the parameter), then takes rank 0's parameter
  and buffer values (one broadcast per dtype).
- Parameters are put into buckets in reverse registration order (about the order backward
  produces their gradients), at most ``bucket_cap_mb`` each (PyTorch's default 25 MB; the first
  bucket 1 MB, as PyTorch's). A post-accumulate-grad hook on each parameter tells the wrapper
  that a backward produced gradients; when the walk is over, the gradients are computed in one
  plan (the backward is lazy: it is one trace), then each bucket is flattened and all-reduced
  with non-blocking MPI requests, all buckets in flight at once: bucket ``k``'s reduction (a
  rank-order sum, see :mod:`lazyvic.distributed.collectives`) runs while the later buckets'
  messages travel. Each ``.grad`` then holds the average over ranks: the sum divided by the
  world size. In an ``"nccl"`` group with the model on ``"cuda"``, each bucket is packed on the
  GPU and averaged by one NCCL all-reduce (``ReduceOp.AVG``), never leaving the device; the
  ``.grad`` tensors are slices of the result. Gradients of CUDA parameters in an ``"mpi"`` group
  travel through host memory and come back to the device.
- ``no_sync()`` skips the reduction (gradients accumulate locally); the first backward outside
  it reduces the accumulated gradients, as in PyTorch.
- ``broadcast_buffers=True`` (default) gives every rank rank 0's buffers (BatchNorm's running
  statistics) at each forward in training mode.

The losses of a data-parallel run equal those of one process on the combined batch up to the
order of the sums: each rank's gradient is a mean over its own rows, then the mean over ranks.
For a fixed world size the order is fixed, so a seeded run gives the same bits every time.
"""

from __future__ import annotations

import contextlib

import numpy as np

from lazyvic import modes, recording
from lazyvic.autograd import engine
from lazyvic.distributed.collectives import all_gather_object, broadcast_flat, traced, value_node
from lazyvic.distributed.process_group import ArrayAllReduce, ReduceOp, group_of, wire_dtype
from lazyvic.dtypes import int32
from lazyvic.errors import ArgumentError, DistributedError
from lazyvic.indexing import cat
from lazyvic.nn.module import Module
from lazyvic.sync import sync
from lazyvic.tensor import Tensor
from lazyvic.trace.node import Node

DEFAULT_BUCKET_CAP_MB = 25  # PyTorch's
FIRST_BUCKET_MB = 1  # PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES


class DistributedDataParallel(Module):
    """Data parallelism across the processes of the default group
    (``torch.nn.parallel.DistributedDataParallel``); see the module docstring.

    Args:
        module: the model (its parameters on every rank must have the same names, shapes and
            dtypes).
        bucket_cap_mb: the most megabytes (2**20 bytes) of gradients all-reduced as one message.
        broadcast_buffers: give every rank rank 0's buffers at each training-mode forward.
        find_unused_parameters: a parameter that got no gradient on a rank counts as a zero
            gradient there (its ``.grad`` is set where any rank had one); without it such a
            parameter raises :class:`DistributedError`.
        device_ids, output_device, dim, process_group (the default group only),
        check_reduction, gradient_as_bucket_view, static_graph: accepted as in PyTorch.

    Raises:
        DistributedError: no process group; the ranks' parameters differ (names the parameter
            and the ranks); a parameter without a gradient after backward (see
            ``find_unused_parameters``).

    ``self.module`` is the wrapped model; ``state_dict()`` keys carry PyTorch's ``module.``
    prefix.
    """

    def __init__(
        self,
        module: Module,
        device_ids=None,
        output_device=None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group=None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
    ):
        super().__init__()
        what = "DistributedDataParallel"
        self._group = group_of(process_group, what)
        if self._group is None:
            raise ArgumentError(f"{what}: this process is not a member of process_group (GroupMember.NON_GROUP_MEMBER)")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.bucket_cap_mb = DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        _check_same_parameters(self._group, module, what)
        with modes.no_grad():
            broadcast_flat(self._group, [p for _, p in module.named_parameters()], 0, what)
            broadcast_flat(self._group, [b for _, b in module.named_buffers()], 0, what)
        self._buckets = _buckets(self._params, self.bucket_cap_mb)
        self._require_sync = True
        self._token = None  # a captured step's last traced collective (their order)
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self._params]

    def forward(self, *inputs, **kwargs):
        self._token = None
        if self.broadcast_buffers and self.training and self._group.size > 1:
            buffers = [b for _, b in self.module.named_buffers()]
            if buffers:
                with modes.no_grad():
                    if recording.active:  # a captured step: the broadcasts are steps of its plan
                        for b in buffers:
                            b._assign(self._traced(b, "broadcast"))
                    else:
                        broadcast_flat(self._group, buffers, 0, "DistributedDataParallel forward (broadcast_buffers)")
        return self.module(*inputs, **kwargs)

    def _traced(self, t: Tensor, collective: str) -> Tensor:
        after = () if self._token is None else (self._token,)
        self._token = traced(t, collective, ReduceOp.SUM, 0, after, group=self._group)
        return self._token

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward accumulates gradients locally without all-reducing them; the first
        backward after the block averages the accumulated gradients."""
        previous, self._require_sync = self._require_sync, False
        try:
            yield
        finally:
            self._require_sync = previous

    def _grad_ready(self, p) -> None:
        # Once per walk (a walk that raised drops its queue: nothing stays pending).
        if self._require_sync and not engine.is_queued(self._reduce):
            engine.queue_callback(self._reduce)

    def _reduce(self) -> None:
        """All-reduce every bucket of gradients (average over ranks) and rebind ``.grad``."""
        what = "DistributedDataParallel (gradient all-reduce)"
        g = self._group
        grads = [p.grad for p in self._params]
        missing = [n for n, t in zip(self._names, grads) if t is None]
        if missing and not self.find_unused_parameters:
            raise DistributedError(
                f"{what}: rank {g.rank}: parameters {missing[:5]} got no gradient in this backward; pass "
                f"find_unused_parameters=True to DistributedDataParallel when some parameters are not used"
            )
        if recording.active:
            if not self.find_unused_parameters:
                return self._reduce_traced(grads)
            recording.current().refuse(
                "DistributedDataParallel(find_unused_parameters=True): which gradients exist is decided per step"
            )
        pending = [t for t in grads if t is not None]
        if pending:
            sync(*pending)  # the backward: one plan
        if g.nccl is not None and all(p.is_cuda for p in self._params):
            return self._reduce_nccl(grads, what)
        jobs = []
        for bucket in self._buckets:
            flat, had = _flatten([self._params[k] for k in bucket], [grads[k] for k in bucket])
            if self.find_unused_parameters:
                flat = np.concatenate([flat, had.astype(flat.dtype)])
            jobs.append(ArrayAllReduce(g, flat, ReduceOp.SUM, what).start())
        for job in jobs:
            job.reduce()
        for bucket, job in zip(self._buckets, jobs):
            total = job.result()
            if self.find_unused_parameters:
                used = total[total.size - len(bucket) :] > 0
            offset = 0
            for j, k in enumerate(bucket):
                p = self._params[k]
                n = p.numel()
                if self.find_unused_parameters and not used[j]:
                    offset += n
                    continue
                mean = total[offset : offset + n].reshape(p.shape)
                np.divide(mean, mean.dtype.type(g.size), out=mean)
                p.grad = Tensor._wrap(value_node(mean, p))  # on the parameter's device
                offset += n

    def _reduce_nccl(self, grads: list, what: str) -> None:
        """An "nccl" group's reduction: each bucket packed on the GPU, averaged by one NCCL
        all-reduce (ReduceOp.AVG), each ``.grad`` a slice of the result; a missing gradient counts
        as zeros, and with ``find_unused_parameters`` a parameter no rank used keeps no gradient."""
        nc = self._group.nccl
        cp = nc.cp
        for bucket in self._buckets:
            params = [self._params[k] for k in bucket]
            parts = [
                cp.zeros(p.numel(), p.dtype.np) if grads[k] is None else nc.flat(grads[k], what)
                for p, k in zip(params, bucket)
            ]
            total = nc.all_reduce(cp.concatenate(parts), params[0].dtype, "avg", what)
            used = None
            if self.find_unused_parameters:
                had = cp.asarray(np.array([grads[k] is not None for k in bucket], dtype=np.int32))
                used = cp.asnumpy(nc.all_reduce(had, int32, "sum", what)) > 0
            offset = 0
            for j, p in enumerate(params):
                n = p.numel()
                if used is None or used[j]:
                    p.grad = Tensor._wrap(Node.buffer(total[offset : offset + n], p.dtype, "cuda", p.shape))
                offset += n

    def _reduce_traced(self, grads: list) -> None:
        """A captured step's reduction: each bucket's all-reduce a node of the step's trace (run
        in the recorded order by every replay), each ``.grad`` a slice of it over the world size."""
        size = self._group.size
        for bucket in self._buckets:
            params = [self._params[k] for k in bucket]
            parts = [grads[k].reshape(-1) for k in bucket]
            flat = cat(parts) if len(parts) > 1 else parts[0]
            wire = wire_dtype(params[0].dtype)
            if wire != flat.dtype.np:
                flat = flat.float()  # float16, bfloat16: summed in float32
            total = self._traced(flat, "all_reduce")
            offset = 0
            for p in params:
                n = p.numel()
                p.grad = (total[offset : offset + n].reshape(p.shape) / size).to(p.dtype)
                offset += n


def _check_same_parameters(g, module: Module, what: str) -> None:
    """Every rank holds the parameters and buffers of rank 0 (names, shapes, dtypes)."""
    mine = [(n, tuple(p.shape), p.dtype.name) for n, p in module.named_parameters()]
    mine += [(n, tuple(b.shape), b.dtype.name) for n, b in module.named_buffers()]
    every = [None] * g.size
    all_gather_object(every, mine, group=g)
    first = every[0]
    for rank, theirs in enumerate(every[1:], start=1):
        if theirs == first:
            continue
        a, b = dict((n, (s, d)) for n, s, d in first), dict((n, (s, d)) for n, s, d in theirs)
        for name in list(a) + [n for n in b if n not in a]:
            if a.get(name) != b.get(name):

                def show(v):
                    return "missing" if v is None else f"shape {v[0]} {v[1]}"

                raise DistributedError(
                    f"{what}: parameter or buffer {name!r} is {show(b.get(name))} on rank {rank} but "
                    f"{show(a.get(name))} on rank 0; every rank must wrap the same model"
                )
        raise DistributedError(f"{what}: rank {rank} registers its parameters in another order than rank 0")


def _buckets(params: list, cap_mb: float) -> list[list[int]]:
    """Parameter indices per bucket: reverse registration order, one dtype per bucket, the first
    bucket at most 1 MB, the others ``cap_mb`` (a parameter larger than a cap is a bucket alone)."""
    buckets, current, size, dtype = [], [], 0, None
    cap = min(FIRST_BUCKET_MB, cap_mb) * 2**20
    for k in reversed(range(len(params))):
        p = params[k]
        nbytes = p.numel() * p.dtype.itemsize
        if current and (size + nbytes > cap or p.dtype is not dtype):
            buckets.append(current)
            current, size = [], 0
            cap = cap_mb * 2**20
        current.append(k)
        size += nbytes
        dtype = p.dtype
    if current:
        buckets.append(current)
    return buckets


def _flatten(params: list, grads: list) -> tuple[np.ndarray, np.ndarray]:
    """(the gradients in one flat array of the transport dtype, zeros for a missing one; 1 or 0
    per parameter: had a gradient)."""
    sizes = [p.numel() for p in params]
    had = np.array([t is not None for t in grads], dtype=np.uint8)
    flat = np.zeros(sum(sizes), dtype=wire_dtype(params[0].dtype))
    offset = 0
    for t, n in zip(grads, sizes):
        if t is not None:
            flat[offset : offset + n] = np.asarray(t.numpy()).reshape(-1)
        offset += n
    return flat, had
