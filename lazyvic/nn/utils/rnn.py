"""Variable-length sequences (``torch.nn.utils.rnn``): padding, and packing as thin wrappers.

``pad_sequence`` stacks sequences of different lengths into one padded tensor;
``pack_padded_sequence``, ``pad_packed_sequence``, ``pack_sequence`` and ``unpad_sequence``
produce and read PyTorch's layout (time-major rows of the sequences still running,
``batch_sizes`` per step, the sort permutation), which ``nn.RNN``/``LSTM``/``GRU`` read (each
sequence stepped over its own length). Padding and packing gather rows with one
``index_select`` (differentiable) from the sequences joined by one ``cat``: the trace has the same
structure whatever the lengths and whichever sequence is the longest, so a training loop over
batches of other lengths finds its plan of symbolic sizes. The lengths are host data, as PyTorch
requires them on the CPU.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Sequence

import numpy as np

from lazyvic.creation import tensor as make_tensor
from lazyvic.errors import ShapeError
from lazyvic.indexing import cat
from lazyvic.tensor import Tensor


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """PyTorch's packed layout: ``data`` (sum of lengths, *) holds, step by step, the rows of
    the sequences still running at that step, longest first; ``batch_sizes`` (int64, one per
    step) counts them; ``sorted_indices`` / ``unsorted_indices`` (int64, or None when the batch
    was already sorted) map between the batch order and the longest-first order."""

    __slots__ = ()


def _lengths(lengths, fn: str) -> np.ndarray:
    arr = np.asarray(lengths.numpy() if isinstance(lengths, Tensor) else lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ShapeError(f"{fn}: lengths must be a 1-D list or tensor of integers, got {arr!r}")
    return arr.astype(np.int64)


def batch_sizes_of(sorted_lengths: np.ndarray) -> np.ndarray:
    """A PackedSequence's ``batch_sizes`` (int64, one per step): how many of the longest-first
    sequences run at each step."""
    steps = np.arange(int(sorted_lengths.max()))
    return (sorted_lengths[None, :] > steps[:, None]).sum(1).astype(np.int64)


def lengths_of(batch_sizes: np.ndarray) -> np.ndarray:
    """The longest-first sequences' lengths (int64) from a PackedSequence's ``batch_sizes``."""
    return (batch_sizes[:, None] > np.arange(int(batch_sizes[0]))[None, :]).sum(0).astype(np.int64)


def _gather(parts: list, rows: np.ndarray) -> Tensor:
    """Rows ``rows`` (int64, any shape: flattened) of the tensors ``parts`` joined along dim 0, in
    one differentiable ``index_select``."""
    joined = cat(parts)
    return joined.index_select(0, make_tensor(rows.reshape(-1)).to(joined.device))


def _order(lengths: np.ndarray, enforce_sorted: bool, fn: str) -> tuple:
    """(longest-first order, sorted_indices, unsorted_indices) of a batch of these lengths: with
    ``enforce_sorted`` they must be non-increasing (then no permutation is recorded), else the
    order is a stable sort."""
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise ValueError(
                f"{fn}: lengths {lengths.tolist()} must be sorted in decreasing order when "
                f"enforce_sorted=True; pass enforce_sorted=False to pack an unsorted batch"
            )
        return np.arange(lengths.size), None, None
    order = np.argsort(-lengths, kind="stable")
    return order, make_tensor(order, dtype=lengths.dtype), make_tensor(np.argsort(order, kind="stable"))


def pad_sequence(
    sequences: Sequence[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """Stack sequences of shapes ``(L_i, *)`` into ``(max L, B, *)`` (``(B, max L, *)`` with
    ``batch_first``), filling with ``padding_value`` after each sequence (``padding_side=
    "right"``) or before it (``"left"``). The dtype is the sequences' (promoted); differentiable.

    Raises:
        ShapeError: no sequences, a 0-d sequence, or trailing dims that differ.
        ValueError: an unknown ``padding_side``.
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    sequences = list(sequences)
    if not sequences:
        raise ShapeError("pad_sequence: received an empty list of sequences")
    if any(s.ndim == 0 for s in sequences) or len({s.shape[1:] for s in sequences}) != 1:
        raise ShapeError(
            f"pad_sequence: sequences must be (L, *) with equal trailing dims, got {[s.shape for s in sequences]}"
        )
    lengths = np.array([s.shape[0] for s in sequences], dtype=np.int64)
    longest = int(lengths.max())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    steps = np.arange(longest)[:, None]  # (T, 1)
    skip = 0 if padding_side == "right" else longest - lengths  # leading padding rows per sequence
    at = steps - skip  # the row of each sequence at each padded step
    filler = int(lengths.sum())  # the padding row, appended after the sequences' rows
    rows = np.where((at >= 0) & (at < lengths), starts + at, filler)  # (T, B)
    if batch_first:
        rows = rows.T
    out = _gather([*sequences, sequences[0].new_full((1, *sequences[0].shape[1:]), padding_value)], rows)
    return out.reshape(*rows.shape, *sequences[0].shape[1:])


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The inverse of :func:`pad_sequence` (right padding): one ``(L_i, *)`` tensor per length."""
    lengths = _lengths(lengths, "unpad_sequence")
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[b, : int(n)] for b, n in enumerate(lengths)]


def pack_padded_sequence(
    input: Tensor, lengths, batch_first: bool = False, enforce_sorted: bool = True
) -> PackedSequence:
    """Pack a padded batch ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``) whose sequence
    ``b`` has ``lengths[b]`` valid steps. With ``enforce_sorted`` the lengths must be
    non-increasing; otherwise the batch is sorted (stably) and the permutation is recorded.

    Raises:
        ShapeError: lengths of the wrong count, a length of 0 or one longer than the input.
        ValueError: unsorted lengths with ``enforce_sorted=True``.
    """
    lengths = _lengths(lengths, "pack_padded_sequence")
    x = input.transpose(0, 1) if batch_first else input
    steps, batch = x.shape[0], x.shape[1] if x.ndim > 1 else 0
    if lengths.shape[0] != batch:
        raise ShapeError(
            f"pack_padded_sequence: expected {batch} lengths for input of shape {input.shape}, got {len(lengths)}"
        )
    if lengths.size and (lengths.min() <= 0 or lengths.max() > steps):
        raise ShapeError(
            f"pack_padded_sequence: every length must be in [1, {steps}] for input of shape {input.shape}, "
            f"got {lengths.tolist()}"
        )
    order, sorted_indices, unsorted_indices = _order(lengths, enforce_sorted, "pack_padded_sequence")
    batch_sizes = batch_sizes_of(lengths[order])
    rows = np.concatenate([t * batch + order[: int(n)] for t, n in enumerate(batch_sizes)])
    flat = x.reshape(steps * batch, *x.shape[2:])
    data = flat.index_select(0, make_tensor(rows).to(input.device))
    return PackedSequence(data, make_tensor(batch_sizes), sorted_indices, unsorted_indices)


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple:
    """Unpack a :class:`PackedSequence` into ``(padded, lengths)``: ``padded`` is ``(T, B, *)``
    (``(B, T, *)`` with ``batch_first``), in the original batch order, filled with
    ``padding_value``; T is the longest length, or ``total_length``; ``lengths`` is int64.

    Raises:
        ShapeError: ``total_length`` shorter than the longest sequence.
    """
    data, batch_sizes, _, unsorted_indices = sequence
    sizes = _lengths(batch_sizes, "pad_packed_sequence")
    steps, batch = len(sizes), int(sizes[0])
    if total_length is not None:
        if total_length < steps:
            raise ShapeError(
                f"pad_packed_sequence: total_length={total_length} is shorter than the longest sequence ({steps})"
            )
        steps = total_length
    sorted_lengths = lengths_of(sizes)
    unsort = np.arange(batch) if unsorted_indices is None else _lengths(unsorted_indices, "pad_packed_sequence")
    n = data.shape[0]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.full((steps, batch), n, dtype=np.int64)  # n: the padding row appended below
    for t, size in enumerate(sizes):
        rows[t, : int(size)] = offsets[t] + np.arange(int(size))
    rows = rows[:, unsort]
    padded = _gather([data, data.new_full((1, *data.shape[1:]), padding_value)], rows)
    padded = padded.reshape(steps, batch, *data.shape[1:])
    return (padded.transpose(0, 1) if batch_first else padded), make_tensor(sorted_lengths[unsort])


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of ``(L_i, *)`` sequences: what ``pack_padded_sequence(pad_sequence(sequences),
    lengths, enforce_sorted=...)`` gives, gathered from the joined sequences in one step.

    Raises:
        ShapeError: no sequences, a 0-d or empty sequence, or trailing dims that differ.
        ValueError: unsorted lengths with ``enforce_sorted=True``.
    """
    sequences = list(sequences)
    if not sequences or any(s.ndim == 0 for s in sequences) or len({s.shape[1:] for s in sequences}) != 1:
        raise ShapeError(
            f"pack_sequence: sequences must be (L, *) with equal trailing dims, got {[s.shape for s in sequences]}"
        )
    lengths = np.array([s.shape[0] for s in sequences], dtype=np.int64)
    if lengths.min() <= 0:
        raise ShapeError(f"pack_sequence: every sequence needs at least one step, got lengths {lengths.tolist()}")
    order, sorted_indices, unsorted_indices = _order(lengths, enforce_sorted, "pack_sequence")
    batch_sizes = batch_sizes_of(lengths[order])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = np.concatenate([starts[order[: int(n)]] + t for t, n in enumerate(batch_sizes)])
    data = _gather(sequences, rows)
    return PackedSequence(data, make_tensor(batch_sizes), sorted_indices, unsorted_indices)


__all__ = [
    "PackedSequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpad_sequence",
]
