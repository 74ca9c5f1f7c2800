"""Datasets (PyTorch's ``torch.utils.data.dataset``): ``Dataset``, ``IterableDataset``,
``TensorDataset``, ``StackDataset``, ``ConcatDataset``, ``ChainDataset``, ``Subset`` and
``random_split``.

A map-style dataset has ``__getitem__`` and ``__len__``; an iterable-style one ``__iter__``.
``TensorDataset`` (and a ``Subset`` of one) also gathers a whole batch at once for the
``DataLoader`` (one indexing per tensor instead of one small tensor per sample, which
``default_collate`` would then stack); the batch is the same as the one ``default_collate`` makes.
"""

from __future__ import annotations

import bisect
import itertools
import math
import numbers
import warnings
from typing import Generic, Iterable, Sequence, TypeVar

import numpy as np

from lazyvic.creation import from_numpy, tensor
from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.generator import default_generator, permutation, resolve
from lazyvic.tensor import Tensor

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: subclasses define ``__getitem__(index)`` (and usually ``__len__``).
    ``a + b`` concatenates (a :class:`ConcatDataset`). ``Dataset[T]`` may be subscripted."""

    def __getitem__(self, index) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """An iterable-style dataset: subclasses define ``__iter__``. ``a + b`` chains (a
    :class:`ChainDataset`). The DataLoader runs in this process, so ``__iter__`` runs once per
    epoch (``lazyvic.utils.data.get_worker_info()`` is None)."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


def _length(t) -> int:
    shape = getattr(t, "shape", None)
    if shape is None or not len(shape):
        raise ShapeError(f"TensorDataset: expected tensors with a first dimension, got {type(t).__name__} {shape}")
    return int(shape[0])


class TensorDataset(Dataset[tuple]):
    """Samples ``(t0[i], t1[i], ...)`` of tensors (or NumPy arrays) that share their first dimension.

    Raises ShapeError when the first dimensions differ (PyTorch asserts "Size mismatch between
    tensors")."""

    def __init__(self, *tensors) -> None:
        sizes = [_length(t) for t in tensors]
        if len(set(sizes)) > 1:
            raise ShapeError(
                f"TensorDataset: size mismatch between tensors: first dimensions {sizes} "
                f"(shapes {[tuple(t.shape) for t in tensors]})"
            )
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return _length(self.tensors[0]) if self.tensors else 0

    def _collated(self, indices: list):
        """The batch ``default_collate([self[i] for i in indices])``, gathered per tensor (realized
        now on the CPU; on CUDA one lazy index_select per tensor); None when a tensor is of a type
        only the per-sample path knows."""
        if type(self).__getitem__ is not TensorDataset.__getitem__ or not self.tensors:
            return None
        batch = [_gather(t, indices) for t in self.tensors]
        return None if any(b is None for b in batch) else batch


def _gather(t, indices: list):
    index = np.asarray(indices, dtype=np.int64)
    if isinstance(t, Tensor):
        if t.device == "cuda":
            return t.index_select(0, tensor(index, device="cuda"))
        return from_numpy(t.numpy()[index])  # a sync point for a pending t
    if isinstance(t, np.ndarray) and t.dtype.kind in "biuf":
        return from_numpy(t[index])
    return None


class StackDataset(Dataset):
    """Samples that gather the same index from several datasets: ``StackDataset(a, b)`` gives
    ``(a[i], b[i])``, ``StackDataset(x=a, y=b)`` gives ``{"x": a[i], "y": b[i]}``.

    Raises ValueError for both or neither form, or datasets of different lengths."""

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if bool(args) == bool(kwargs):
            raise ArgumentError(
                "StackDataset: give datasets as positional or as keyword arguments, not both or neither"
            )
        datasets = list(args) if args else list(kwargs.values())
        lengths = {len(d) for d in datasets}
        if len(lengths) != 1:
            raise ArgumentError(f"StackDataset: size mismatch between datasets: lengths {[len(d) for d in datasets]}")
        self._length = lengths.pop()
        self.datasets = tuple(args) if args else dict(kwargs)

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset[T_co]):
    """Map-style datasets one after another: index ``i`` reads the dataset it falls in.

    Raises ValueError for no datasets, TypeError for an IterableDataset (use ChainDataset)."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset (use ChainDataset)")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        n = len(self)
        if idx < 0:
            if -idx > n:
                raise ArgumentError(f"ConcatDataset: index {idx} is out of range for a dataset of length {n}")
            idx += n
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another (chained as they are iterated).

    Raises TypeError, when iterated or measured, for a dataset that is not iterable-style."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError(f"ChainDataset only supports IterableDataset, got {type(d).__name__}")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError(f"ChainDataset only supports IterableDataset, got {type(d).__name__}")
            total += len(d)
        return total


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)

    def _collated(self, indices: list):
        gather = getattr(self.dataset, "_collated", None)
        if gather is None or type(self).__getitem__ is not Subset.__getitem__:
            return None
        return gather([self.indices[i] for i in indices])


def random_split(dataset: Dataset, lengths: Sequence, generator=default_generator) -> list[Subset]:
    """Split ``dataset`` into non-overlapping :class:`Subset` s of the given ``lengths``, from one
    random permutation of its indices (``lazyvic.randperm`` over ``generator``'s stream).

    ``lengths``: ints that sum to ``len(dataset)``, or fractions that sum to 1: each split then
    gets ``floor(len * fraction)`` samples, and the remainder is handed out one at a time, round
    robin from the first split (PyTorch's rule; an empty split warns).

    Raises:
        ValueError: a fraction outside [0, 1], or lengths that do not add up to the dataset's length.
        TypeError: a length that is neither an int nor a fraction, a bad generator.
    """
    lengths = list(lengths)
    for v in lengths:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"random_split: lengths must be ints or fractions, got {lengths!r}")
    n = len(dataset)
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:
        counts = []
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ArgumentError(f"random_split: fraction at index {i} is not between 0 and 1: {frac}")
            counts.append(math.floor(n * frac))
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, c in enumerate(counts):
            if c == 0:
                warnings.warn(
                    f"random_split: length of split at index {i} is 0; this might result in an empty dataset",
                    stacklevel=2,
                )
        lengths = counts
    if any(not isinstance(v, numbers.Integral) or v < 0 for v in lengths) or sum(lengths) != n:
        raise ArgumentError(
            f"random_split: the lengths {lengths} do not add up to the length of the dataset ({n}) "
            f"(give non-negative ints that sum to it, or fractions that sum to 1)"
        )
    order = permutation(n, resolve(generator, "random_split")).tolist()
    return [Subset(dataset, order[end - k : end]) for end, k in zip(itertools.accumulate(lengths), lengths)]
