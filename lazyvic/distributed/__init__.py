"""``lazyvic.distributed``: data-parallel training across processes (``torch.distributed``'s names).

Built on MPI through mpi4py (see :mod:`lazyvic.distributed.process_group`): start the processes
with ``lazyvic run -n 4 script.py`` (or ``mpirun``), call :func:`init_process_group`, wrap the
model in :class:`lazyvic.nn.parallel.DistributedDataParallel` and feed each rank its part of
the data with :class:`lazyvic.utils.data.DistributedSampler`.

- process group: :func:`init_process_group`, :func:`destroy_process_group`,
  :func:`is_initialized`, :func:`get_rank`, :func:`get_world_size`, :func:`get_backend`;
  subgroups: :func:`new_group`, :func:`get_process_group_ranks`, :func:`get_global_rank`,
  :func:`get_group_rank`, :class:`GroupMember`;
- collectives on tensors (:mod:`lazyvic.distributed.collectives`, each a sync point):
  :func:`all_reduce`, :func:`broadcast`, :func:`all_gather`, :func:`all_gather_into_tensor`,
  :func:`reduce_scatter`, :func:`reduce_scatter_tensor`, :func:`barrier`, and on picklable
  objects :func:`all_gather_object`, :func:`broadcast_object_list`; with a root
  (:mod:`lazyvic.distributed.rooted`) :func:`reduce`, :func:`gather`, :func:`scatter`, and
  point to point :func:`send`, :func:`recv`, :func:`isend`, :func:`irecv`;
- :mod:`lazyvic.distributed.checkpoint`: sharded ``save``/``load`` that reload on another world size;
- :mod:`lazyvic.distributed.run`: the launcher (``lazyvic run -n N script.py``, as ``torchrun``).
"""

from lazyvic.distributed import checkpoint  # (PyTorch: torch.distributed.checkpoint)
from lazyvic.distributed.collectives import (
    ReduceOp,
    Work,
    all_gather,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object_list,
    reduce_scatter,
    reduce_scatter_tensor,
)
from lazyvic.distributed.process_group import (
    DEFAULT_TIMEOUT,
    WORLD,
    GroupMember,
    ProcessGroup,
    destroy_process_group,
    get_backend,
    get_global_rank,
    get_group_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    is_available,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    new_group,
)
from lazyvic.distributed.rooted import gather, irecv, isend, recv, reduce, scatter, send
from lazyvic.errors import DistributedError

__all__ = [
    "DEFAULT_TIMEOUT",
    "DistributedError",
    "GroupMember",
    "ProcessGroup",
    "ReduceOp",
    "WORLD",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "checkpoint",
    "destroy_process_group",
    "gather",
    "get_backend",
    "get_global_rank",
    "get_group_rank",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_gloo_available",
    "is_initialized",
    "is_mpi_available",
    "is_nccl_available",
    "new_group",
    "isend",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "send",
]
