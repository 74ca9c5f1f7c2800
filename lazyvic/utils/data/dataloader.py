"""``DataLoader`` (PyTorch's ``torch.utils.data.DataLoader``): batches of a dataset as lazyvic tensors.

Same signature, defaults, checks and order of samples as PyTorch's. Differences, all documented
on the class: the loader always runs in this process (``num_workers`` and the worker options are
accepted, no worker is started), and the random orders come from lazyvic's seeded stream.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from lazyvic.errors import ArgumentError
from lazyvic.utils.data.collate import default_collate, default_convert
from lazyvic.utils.data.dataset import Dataset, IterableDataset
from lazyvic.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


def get_worker_info():
    """None: the DataLoader runs in this process (PyTorch returns None outside a worker too)."""
    return None


class DataLoader:
    """Iterate a dataset in batches, as ``torch.utils.data.DataLoader``.

    Map-style datasets (``__getitem__``, ``__len__``) are read in the order of ``sampler``
    (default: sequential, or a :class:`RandomSampler` when ``shuffle``), grouped by a
    :class:`BatchSampler` of ``batch_size`` (``drop_last`` drops a short last batch) or by your
    ``batch_sampler``, and each batch goes through ``collate_fn`` (default
    :func:`default_collate`: tensors stacked along a new first axis, numbers to tensors). With
    ``batch_size=None`` samples come one by one through :func:`default_convert`. Iterable-style
    datasets are read in their own order, batched the same way.

    ``shuffle=True`` draws a new order every epoch from lazyvic's seeded Philox stream: the same
    ``lazyvic.manual_seed`` gives the same orders, ``generator=`` (a ``lazyvic.Generator``) is
    honoured. Batches are lazyvic tensors, realized on the CPU (the dataset's values are read now);
    a ``TensorDataset`` (or a ``Subset`` of one) is gathered one indexing per tensor per batch.

    Workers: the loader runs in this process. ``num_workers``, ``prefetch_factor``,
    ``persistent_workers``, ``worker_init_fn``, ``multiprocessing_context``, ``timeout`` and
    ``in_order`` are checked as PyTorch checks them and otherwise ignored: no worker is started,
    so ``worker_init_fn`` is never called, ``get_worker_info()`` returns None and an
    IterableDataset is iterated once per epoch (not once per worker). ``pin_memory`` and
    ``pin_memory_device`` are accepted without effect (no pinned memory).

    Raises:
        ValueError: as PyTorch: a negative ``num_workers`` or ``timeout``; ``prefetch_factor``
            without workers; ``persistent_workers`` without workers; ``shuffle``, ``sampler`` or
            ``batch_sampler`` with an IterableDataset; ``sampler`` with ``shuffle``;
            ``batch_sampler`` with ``batch_size`` (other than 1), ``shuffle``, ``sampler`` or
            ``drop_last``; ``drop_last`` with ``batch_size=None``; a ``batch_size`` that is not
            a positive int.
        TypeError: ``len()`` of a loader over an IterableDataset without ``__len__``.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler | Iterable | None = None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if num_workers < 0:
            raise ArgumentError(
                "DataLoader: num_workers option should be non-negative; use num_workers=0 to disable multiprocessing"
            )
        if timeout < 0:
            raise ArgumentError("DataLoader: timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ArgumentError(
                "DataLoader: prefetch_factor option could only be specified in multiprocessing; "
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None"
            )
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ArgumentError("DataLoader: prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ArgumentError("DataLoader: persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order
        self.persistent_workers = persistent_workers

        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (False, None):
                raise ArgumentError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ArgumentError(
                    f"DataLoader with IterableDataset: expected unspecified sampler option, but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ArgumentError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                    f"but got batch_sampler={batch_sampler}"
                )
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ArgumentError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ArgumentError(
                    "DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ArgumentError(
                "DataLoader: batch_size=None option disables auto-batching and is mutually exclusive with drop_last"
            )
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler if sampler is not None else _Unbounded(), batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self) -> _DataLoaderIter:
        return _DataLoaderIter(self)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
            return n
        return len(self._index_sampler)


class _Unbounded:
    """The index source of an IterableDataset: only the batch size matters (PyTorch's
    ``_InfiniteConstantSampler``)."""

    def __iter__(self):
        while True:
            yield None


class _DataLoaderIter:
    """One epoch of a :class:`DataLoader`, read in this process."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._dataset = loader.dataset
        self._collate_fn = loader.collate_fn
        self._auto = loader._auto_collation
        self._drop_last = loader.drop_last
        self._batch_size = loader.batch_size
        if loader._iterable:
            self._source = iter(loader.dataset)
            self._indices = None
        else:
            self._source = None
            self._indices = iter(loader._index_sampler)
        # The per-tensor gather of TensorDataset (and Subset of one): only for the default collate,
        # whose result it equals.
        gather = getattr(loader.dataset, "_collated", None)
        self._gather = gather if self._auto and self._collate_fn is default_collate else None

    def __iter__(self) -> _DataLoaderIter:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self):
        if self._source is not None:
            return self._next_iterable()
        index = next(self._indices)
        if not self._auto:
            return self._collate_fn(self._dataset[index])
        index = list(index)
        if self._gather is not None:
            batch = self._gather(index)
            if batch is not None:
                return batch
        getitems = getattr(self._dataset, "__getitems__", None)
        samples = getitems(index) if callable(getitems) else [self._dataset[i] for i in index]
        return self._collate_fn(samples)

    def _next_iterable(self):
        if not self._auto:
            return self._collate_fn(next(self._source))
        samples = []
        for _ in range(self._batch_size):
            try:
                samples.append(next(self._source))
            except StopIteration:
                break
        if not samples or (self._drop_last and len(samples) < self._batch_size):
            self._source = iter(())
            raise StopIteration
        return self._collate_fn(samples)
