"""Samplers (PyTorch's ``torch.utils.data.sampler``): the orders a DataLoader reads a map-style
dataset in. ``Sampler``, ``SequentialSampler``, ``RandomSampler``, ``SubsetRandomSampler``,
``WeightedRandomSampler``, ``BatchSampler``.

Random orders are drawn now, when an epoch starts, from lazyvic's seeded Philox stream
(:mod:`lazyvic.generator`): the same ``lazyvic.manual_seed`` (or the same ``generator=``) gives
the same orders, and each epoch draws new ones.
"""

from __future__ import annotations

import itertools
from typing import Generic, Iterable, Iterator, Sequence, Sized, TypeVar

import numpy as np

from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.generator import Generator, draw_seed, integers, multinomial, permutation, resolve

T_co = TypeVar("T_co", covariant=True)


class Sampler(Generic[T_co]):
    """Base class: subclasses define ``__iter__`` (indices, or lists of indices for a batch
    sampler) and usually ``__len__``. ``data_source`` is accepted and ignored, as in PyTorch."""

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of Sampler should implement __iter__.")


class SequentialSampler(Sampler[int]):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """Indices of ``data_source`` in a random order.

    Without replacement: whole random permutations (then part of one) until ``num_samples``
    (default ``len(data_source)``). With replacement: ``num_samples`` indices uniform in
    ``[0, len)``. With ``generator=None`` each epoch seeds a fresh generator from the global one
    (as PyTorch does), so ``lazyvic.manual_seed`` fixes every epoch's order and epochs differ.

    Raises TypeError for a non-bool ``replacement``, ValueError for a ``num_samples`` that is
    not a positive int.
    """

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement should be a boolean value, but got replacement={replacement}")
        n = self.num_samples
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ArgumentError(
                f"RandomSampler: num_samples should be a positive integer value, but got num_samples={n}"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        gen = self.generator
        if gen is None:
            gen = Generator().manual_seed(draw_seed(resolve(None, "RandomSampler")))
        else:
            gen = resolve(gen, "RandomSampler")
        if self.replacement:
            for start in range(0, self.num_samples, 32):  # in chunks, as PyTorch draws them
                yield from integers(n, min(32, self.num_samples - start), gen).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from permutation(n, gen).tolist()
            if self.num_samples % n:
                yield from permutation(n, gen)[: self.num_samples % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given ``indices`` in a random order (a permutation drawn each epoch from ``generator``,
    by default the global one)."""

    def __init__(self, indices: Sequence[int], generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in permutation(len(self.indices), resolve(self.generator, "SubsetRandomSampler")).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices of ``weights`` drawn with probabilities proportional to them (with
    or without replacement): ``lazyvic.multinomial`` over ``generator``'s stream.

    Raises ValueError for a ``num_samples`` that is not a positive int, a non-bool
    ``replacement`` (as PyTorch), or invalid weights (when iterated, as ``multinomial``);
    ShapeError for weights that are not 1-D.
    """

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True, generator=None):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ArgumentError(
                f"WeightedRandomSampler: num_samples should be a positive integer value, but got num_samples={num_samples}"
            )
        if not isinstance(replacement, bool):
            raise ArgumentError(
                f"WeightedRandomSampler: replacement should be a boolean value, but got replacement={replacement}"
            )
        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ShapeError(
                f"WeightedRandomSampler: weights should be a 1d sequence but given weights have shape {w.shape}"
            )
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        gen = resolve(self.generator, "WeightedRandomSampler")
        yield from multinomial(self.weights, self.num_samples, self.replacement, gen).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list]):
    """Lists of ``batch_size`` indices from ``sampler`` (any iterable of indices); the last,
    shorter list is dropped when ``drop_last``.

    Raises ValueError for a ``batch_size`` that is not a positive int or a non-bool ``drop_last``."""

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ArgumentError(
                f"BatchSampler: batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ArgumentError(f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list]:
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
