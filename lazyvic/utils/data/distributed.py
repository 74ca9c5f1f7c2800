"""``DistributedSampler`` (PyTorch's ``torch.utils.data.distributed``): each of ``num_replicas``
processes reads its own share of a map-style dataset."""

from __future__ import annotations

from typing import Iterator, Sized

from lazyvic.distributed import process_group
from lazyvic.errors import ArgumentError
from lazyvic.generator import Generator, permutation
from lazyvic.utils.data.sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler[int]):
    """The indices of ``dataset`` that one process (``rank`` of ``num_replicas``) reads.

    The semantics are PyTorch's ``torch/utils/data/distributed.py`` (2.13). Let ``n =
    len(dataset)`` and ``r = num_replicas``:

    - ``drop_last=False``: every rank gets ``num_samples = ceil(n / r)`` indices. The list of
      ``total_size = num_samples * r`` indices is the order (``0..n-1``, or a permutation) padded
      with its own first indices, repeated as many times as needed when ``r > n``.
    - ``drop_last=True``: every rank gets ``num_samples = n // r`` indices (PyTorch writes it
      ``ceil((n - r) / r)`` when ``r`` does not divide ``n``) and the tail of the order past
      ``total_size`` is dropped; with ``r > n`` each rank gets none.
    - rank ``k`` reads ``order[k:total_size:r]``; ``len(sampler) == num_samples`` for every rank,
      and the ranks together read every index (``drop_last=False``) exactly once, besides the
      padding. ``n == 0`` gives every rank an empty order, as in PyTorch.

    With ``shuffle=True`` the order is a permutation drawn from a fresh :class:`lazyvic.Generator`
    seeded with ``seed + epoch`` (the draw lazyvic's ``RandomSampler`` uses), so it depends only
    on ``seed`` and the epoch: every rank computes the same one, each epoch the same as last time
    unless :meth:`set_epoch` is called (call it before each epoch's loader iterator, as in
    PyTorch). The split, padding and per-epoch determinism are PyTorch's; the permutation comes
    from lazyvic's Philox stream, so a shuffled order differs from PyTorch's for the same seed.
    The global generator is neither read nor advanced.

    Args:
        dataset: a sized dataset (only ``len(dataset)`` is read).
        num_replicas: the number of processes; by default ``lazyvic.distributed.get_world_size()``.
        rank: this process's rank in ``[0, num_replicas)``; by default
            ``lazyvic.distributed.get_rank()``.
        shuffle: read the permutation of ``seed + epoch`` (default) or ``0..n-1`` in order.
        seed: the shuffle's seed; must be the same on every rank.
        drop_last: drop the tail so the split is even, instead of padding it.

    Raises:
        ArgumentError: ``rank`` is outside ``[0, num_replicas - 1]`` (a ValueError, as PyTorch);
            or ``num_replicas`` or ``rank`` is None and ``lazyvic.distributed`` is unavailable or
            its default process group is not initialized (a RuntimeError too; PyTorch 2.13 raises
            ValueError for the latter).
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None:
            num_replicas = _default_group().get_world_size()
        if rank is None:
            rank = _default_group().get_rank()
        if rank >= num_replicas or rank < 0:
            raise ArgumentError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        # Integer ceilings: PyTorch's math.ceil of a float division, exact for every size.
        if drop_last and n % num_replicas != 0:
            self.num_samples = -(-(n - num_replicas) // num_replicas)
        else:
            self.num_samples = -(-n // num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            indices = permutation(n, Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[: self.total_size]
        else:
            padding = self.total_size - n
            indices += (indices * -(-padding // n))[:padding] if padding > n else indices[:padding]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch: with ``shuffle=True`` the next iteration draws the order of ``seed +
        epoch`` (the same on every rank); otherwise it has no effect."""
        self.epoch = epoch


def _default_group():
    """``lazyvic.distributed``'s process-group functions, its default group initialized.

    Raises:
        ArgumentError: no default group (PyTorch's message; a ValueError as PyTorch's, and a
            RuntimeError).
    """
    if not process_group.is_initialized():
        raise ArgumentError(
            "Default process group has not been initialized, please make sure to call init_process_group."
        )
    return process_group
