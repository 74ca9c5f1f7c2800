"""The seeded random-number generator: ``lazyvic.Generator`` and the global ``default_generator``.

A generator is a (seed, offset) pair over the counter-based Philox4x32-10 stream
(:mod:`lazyvic.ops.source`; Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC'11). A random op takes its words from the stream when it is recorded (``take``): it becomes
a lazy ``rand``/``randn`` node whose (seed, offset) are scalar inputs, so it fuses, and the same
seed gives the same bits on every run, interpreted or compiled, on the CPU or on CUDA. The draws
whose result shapes a program (``randperm``, ``multinomial``, the samplers of
:mod:`lazyvic.utils.data`) are computed here, now, from the same stream.

There is one stream for every device: ``Generator(device="cuda")`` draws the same numbers as a CPU
generator with the same seed (PyTorch keeps a separate generator per device).

Threads: a generator (the default one included) is shared by the threads that use it, as in
PyTorch; :meth:`Generator.take` reserves words under a lock, so two threads never draw the same
words, but which thread gets which words depends on their timing. A thread that needs a
reproducible stream passes a ``generator=`` of its own.

This module sits below :mod:`lazyvic.tensor`: the in-place random methods of ``Tensor``
(``uniform_``, ``normal_``, ``bernoulli_``, ``random_``, ``exponential_``) and its ``bernoulli``
and ``multinomial`` call the draws at the end of this file, which are written over the tensors
they are handed and never import the Tensor class (see also ``Generator.tensor_type``).
"""

from __future__ import annotations

import functools
import math
import numbers
import secrets
import threading

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import recording
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.ops.source import uniform_bits
from lazyvic.shapes import broadcast_shapes
from lazyvic.trace.node import Node
from lazyvic.transfer import device as _device

_SEED_MASK = 0x7FFFFFFFFFFFFFFF  # seeds are kept to 63 bits: they enter traces as int64 scalars
_take_lock = threading.Lock()  # Generator.take: no two draws get the same words


class Generator:
    """PyTorch's ``torch.Generator``: the state of one seeded Philox stream.

    ``Generator(device="cpu")``; ``device`` may be ``"cpu"``, ``"cuda"`` or a
    :class:`lazyvic.device` (the stream does not depend on it). Pass it as ``generator=`` to the
    random functions, the in-place samplers (``Tensor.uniform_`` ...), ``randperm``,
    ``multinomial``, ``random_split`` and the samplers of ``lazyvic.utils.data``.

    The state is ``[seed, offset]`` (an int64 tensor from :meth:`get_state`): the offset counts
    the 32-bit Philox words drawn so far. Seeds are taken modulo 2**63 (PyTorch keeps 64 bits).

    Raises:
        DeviceError: ``device`` is not a device.
    """

    default_seed = 67280421310721  # PyTorch's default initial seed
    # lazyvic.Tensor, for get_state: lazyvic.random hands it over when it is imported (this module
    # sits below lazyvic.tensor, which imports it, so it cannot import the class itself).
    tensor_type = None

    def __init__(self, device="cpu"):
        self._device = _device(device)
        self._seed = self.default_seed
        self._offset = 0

    @property
    def device(self) -> _device:
        return self._device

    def manual_seed(self, seed) -> Generator:
        """Seed the stream (and start it from its first word); returns ``self``."""
        self._seed = int(seed) & _SEED_MASK
        self._offset = 0
        return self

    def seed(self) -> int:
        """Seed with a non-deterministic number (from the operating system) and return it."""
        return self.manual_seed(secrets.randbits(63))._seed

    def initial_seed(self) -> int:
        """The seed the stream was last seeded with."""
        return self._seed

    def get_offset(self) -> int:
        """The number of 32-bit words drawn since the stream was seeded."""
        return self._offset

    def set_offset(self, offset: int) -> Generator:
        """Continue the stream at word ``offset``; returns ``self``. Raises ValueError for a negative offset."""
        if int(offset) < 0:
            raise ArgumentError(f"Generator.set_offset: the offset must be non-negative, got {offset}")
        self._offset = int(offset)
        return self

    def get_state(self):
        """The state as an int64 tensor ``[seed, offset]`` (a snapshot; save it to resume exactly)."""
        return self.tensor_type(np.array([self._seed, self._offset], dtype=np.int64))

    def set_state(self, new_state, _opname: str = "Generator.set_state") -> Generator:
        """Restore a state from :meth:`get_state` (a tensor, an array or two ints); returns ``self``.

        Raises:
            ValueError: anything but two non-negative integers with seed < 2**63.
        """
        arr = np.asarray(new_state.numpy() if hasattr(new_state, "numpy") else new_state)
        if arr.shape != (2,) or arr.dtype.kind not in "iu" or (arr < 0).any() or int(arr[0]) >= 1 << 63:
            raise ArgumentError(
                f"{_opname}: expected [seed, offset] as two non-negative integers with seed < 2**63, got {arr!r}"
            )
        self._seed, self._offset = int(arr[0]), int(arr[1])
        return self

    def clone_state(self) -> Generator:
        """A new generator on the same device with this one's seed and offset."""
        g = Generator(self._device)
        g._seed, g._offset = self._seed, self._offset
        return g

    def take(self, n: int) -> tuple:
        """Reserve ``n`` words of the stream: returns (seed, offset of the first word) and moves the
        offset past them, rounded up to whole Philox blocks of 4 words. Thread-safe."""
        words = (int(n) + 3) // 4 * 4
        with _take_lock:
            offset = self._offset
            self._offset = offset + words
            return self._seed, offset

    def __repr__(self) -> str:
        return f"<lazyvic.Generator device={self._device} seed={self._seed} offset={self._offset}>"


default_generator = Generator()  # PyTorch's name: the global generator every random op draws from by default


def resolve(generator, opname: str) -> Generator:
    """``generator``, or the global one for None. Raises TypeError (naming ``opname``) for others."""
    if generator is None:
        return default_generator
    if not isinstance(generator, Generator):
        raise TypeError(f"{opname}: generator must be a lazyvic.Generator, got {type(generator).__name__}")
    return generator


# --------------------------------------------------------------- host-side draws
def draw_seed(generator: Generator) -> int:
    """A 63-bit seed for a new generator from two words of ``generator``'s stream (as PyTorch's
    samplers seed a fresh generator from the global one for each epoch)."""
    seed, offset = generator.take(2)
    lo, hi = (int(w) for w in uniform_bits(2, seed, offset))
    return (hi << 32 | lo) & _SEED_MASK


def permutation(n: int, generator: Generator) -> np.ndarray:
    """A random permutation of ``0..n-1`` (int64): the order that sorts ``n`` words of the stream
    (stably, so it is defined on ties)."""
    seed, offset = generator.take(n)
    return np.argsort(uniform_bits(n, seed, offset), kind="stable").astype(np.int64)


def integers(high: int, count: int, generator: Generator) -> np.ndarray:
    """``count`` integers uniform in ``[0, high)`` (int64), one word each, by Lemire's
    multiply-shift (``word * high >> 32``; "Fast random integer generation in an interval",
    ACM TOMS 2019, without the rejection step: a bias below ``high / 2**32``).

    Raises ValueError for ``high`` outside ``[1, 2**32]``."""
    if not 1 <= high <= 1 << 32:
        raise ArgumentError(f"integers: high must be in [1, 2**32], got {high}")
    seed, offset = generator.take(count)
    words = uniform_bits(count, seed, offset).astype(np.uint64)
    return ((words * np.uint64(high)) >> np.uint64(32)).astype(np.int64)


def multinomial(probs: np.ndarray, num_samples: int, replacement: bool, generator: Generator) -> np.ndarray:
    """Category indices drawn from the rows of ``probs`` (PyTorch's ``torch.multinomial``).

    ``probs``: (C,) or (R, C) non-negative weights (need not sum to one). Returns int64
    (num_samples,) or (R, num_samples). With replacement, inverse transform: word ``k`` of a
    row's draw, as ``u`` in [0, 1), picks the first category whose cumulative weight exceeds
    ``u * total`` (a category of weight 0 is never picked). Without replacement, the exponential
    race (Efraimidis & Spirakis, "Weighted random sampling with a reservoir", IPL 2006): each
    category gets key ``w / E`` with ``E`` exponential(1) from one word; the ``num_samples``
    largest keys, in decreasing order, are distributed as successive draws without replacement.
    Takes ``R * num_samples`` words with replacement, ``R * C`` without.

    Raises:
        ShapeError: ``probs`` is not 1-D or 2-D, or has no categories.
        ValueError: ``num_samples`` is not positive; a weight is negative, inf or NaN; a row sums
            to 0; or, without replacement, a row has fewer than ``num_samples`` non-zero weights.
    """
    if probs.ndim not in (1, 2) or probs.shape[-1] == 0:
        raise ShapeError(f"multinomial: expected a 1-D or 2-D tensor of probabilities, got shape {probs.shape}")
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples <= 0:
        raise ArgumentError(f"multinomial: num_samples must be a positive integer, got {num_samples!r}")
    num_samples = int(num_samples)
    rows = probs.reshape(-1, probs.shape[-1]).astype(np.float64)
    n_rows, n_cat = rows.shape
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise ArgumentError("multinomial: the probability tensor contains either inf, nan or an element < 0")
    totals = rows.sum(axis=1)
    if (totals <= 0).any():
        raise ArgumentError(f"multinomial: invalid distribution: row {int(np.argmin(totals))} sums to 0")
    if not replacement:
        if num_samples > n_cat:
            raise ArgumentError(
                f"multinomial: cannot sample {num_samples} > {n_cat} categories without replacement (shape {probs.shape})"
            )
        nonzero = (rows > 0).sum(axis=1)
        if (nonzero < num_samples).any():
            raise ArgumentError(
                f"multinomial: invalid distribution: with replacement=False, row {int(np.argmin(nonzero))} has "
                f"{int(nonzero.min())} non-zero categories, fewer than num_samples={num_samples}"
            )
        seed, offset = generator.take(n_rows * n_cat)
        words = uniform_bits(n_rows * n_cat, seed, offset).reshape(n_rows, n_cat).astype(np.float64)
        exponential = -np.log((words + 0.5) * (1.0 / 4294967296.0))  # (0, 1): E is finite and > 0
        keys = rows / exponential
        out = np.argsort(-keys, axis=1, kind="stable")[:, :num_samples]
    else:
        seed, offset = generator.take(n_rows * num_samples)
        u = uniform_bits(n_rows * num_samples, seed, offset).reshape(n_rows, num_samples) * (1.0 / 4294967296.0)
        cdf = np.cumsum(rows, axis=1)
        out = np.empty((n_rows, num_samples), dtype=np.int64)
        for r in range(n_rows):
            out[r] = np.searchsorted(cdf[r], u[r] * cdf[r, -1], side="right")
        np.minimum(out, n_cat - 1, out=out)
    out = out.astype(np.int64)
    return out.reshape(num_samples) if probs.ndim == 1 else out


# ------------------------------------------------------- lazy draws over tensors
# Written over the tensors they are handed (``like``: a Tensor or the Tensor class), as
# lazyvic.indexing is: Tensor's in-place random methods call them, and this module never imports
# lazyvic.tensor.
def source(like, opname: str, shape: tuple, dtype: dt.DType, device: str, generator: Generator):
    """A lazy ``rand`` (uniform [0, 1)) or ``randn`` (standard normal) tensor of ``shape`` and float
    ``dtype`` on canonical ``device``; takes ``numel + 1`` words of ``generator``'s stream, whose
    position enters the trace as two int64 scalar inputs (a new seed never recompiles)."""
    words = math.prod(shape) + 1
    seed, offset = generator.take(words)
    s = like._from_node(Node.scalar(seed, dt.int64))
    o = like._from_node(Node.scalar(offset, dt.int64))
    if recording.active:  # a captured step: each replay draws the next numbers
        rec = recording.current()
        if rec is not None:
            rec.dynamic((s._node, o._node), functools.partial(generator.take, words))
    return like.apply(opname, s, o, device=device, shape=tuple(shape), dtype=dtype)


def uniform_integers(like, shape: tuple, low: int, high: int, dtype: dt.DType, device: str, generator: Generator):
    """Integers uniform in ``[low, high)`` as ``dtype``: ``floor(u * (high - low)) + low`` with ``u``
    a float64 uniform of 32 random bits (lazy), so spans wider than 2**32 are covered with a step
    of ``span / 2**32``. ``high - low`` is at most 2**63."""
    u = source(like, "rand", shape, dt.float64, device, generator)
    span = high - low
    k = (u * float(span)).to(dt.int64).clamp(max=span - 1)
    out = k + low if low else k
    return out if dtype is dt.int64 else out.to(dtype)


def _float_dtype(t, opname: str) -> dt.DType:
    if not t.dtype.is_floating_point:
        raise DTypeError(f"{opname}: expected a floating-point tensor, got {t.dtype.name}")
    return t.dtype


def _probability(t, opname: str, p):
    """``p`` (a number, or a float tensor that broadcasts to ``t``'s shape), checked to lie in [0, 1]
    where its values are known now (a number, or realized data on the CPU)."""
    if hasattr(p, "_node"):
        if not p.dtype.is_floating_point:
            raise DTypeError(f"{opname}: probabilities must be a floating-point tensor, got {p.dtype.name}")
        if broadcast_shapes(p.shape, t.shape, opname) != t.shape:
            raise ShapeError(f"{opname}: probabilities of shape {p.shape} do not broadcast to the shape {t.shape}")
        node = p._node
        values = node.data if node.op == "buffer" and node.device == "cpu" else None
    elif isinstance(p, numbers.Real) and not isinstance(p, bool):
        p = float(p)
        values = np.asarray(p)
    else:
        raise TypeError(f"{opname}: p must be a number or a Tensor, got {type(p).__name__}")
    if values is not None:
        bad = values[~((values >= 0) & (values <= 1))]
        if bad.size:
            raise ArgumentError(f"{opname}: expects every probability p in [0, 1], got {float(bad.ravel()[0])}")
    return p


def uniform_(t, from_: float, to: float, generator):
    """``Tensor.uniform_``: ``from_ + (to - from_) * u`` (``u`` uniform in [0, 1)).

    Raises DTypeError (not a float tensor), ValueError (``from_ > to``), TypeError (generator)."""
    d = _float_dtype(t, "uniform_")
    if not from_ <= to:
        raise ArgumentError(f"uniform_: expects from_ <= to, got from_={from_}, to={to}")
    u = source(t, "rand", t.shape, d, t.device, resolve(generator, "uniform_"))
    return t._assign(u if (from_, to) == (0.0, 1.0) else u * (to - from_) + from_)


def normal_(t, mean: float, std: float, generator):
    """``Tensor.normal_``: ``mean + std * z`` (``z`` standard normal, Box-Muller: see ``lazyvic.randn``).

    Raises DTypeError (not a float tensor), ValueError (``std < 0``), TypeError (generator)."""
    d = _float_dtype(t, "normal_")
    if not std >= 0:
        raise ArgumentError(f"normal_: expects std >= 0.0, got std={std}")
    z = source(t, "randn", t.shape, d, t.device, resolve(generator, "normal_"))
    return t._assign(z if (mean, std) == (0.0, 1.0) else z * std + mean)


def bernoulli(t, p, generator, opname: str = "bernoulli"):
    """0/1 draws of ``t``'s shape and dtype: 1 with probability ``p`` (a number or a float tensor
    that broadcasts to ``t``), or ``t`` itself (float probabilities) when ``p`` is None: ``u < p``
    with ``u`` a float64 uniform of 32 random bits. No gradient.

    Raises ValueError (a probability outside [0, 1]: numbers always, tensors when they are realized
    data on the CPU), DTypeError (integer probabilities), ShapeError (``p`` does not broadcast)."""
    if p is None:
        _float_dtype(t, opname)
    p = _probability(t, opname, t if p is None else p)
    u = source(t, "rand", t.shape, dt.float64, t.device, resolve(generator, opname))
    return (u < p).to(t.dtype)


def random_(t, bounds: tuple, to, generator):
    """``Tensor.random_``: integers uniform in ``[0, 2**24]`` (float32), ``[0, 2**53]`` (float64),
    ``[0, max]`` (integers; bool ``[0, 1]``) for ``random_()``; ``[0, to)`` for ``random_(to)``;
    ``[from_, to)`` for ``random_(from_, to)`` (``to=None``: up to the dtype's largest value).
    See :func:`uniform_integers` for the resolution of spans above 2**32.

    Raises TypeError (more than two bounds, non-integer bounds), ValueError (``from_ >= to``, a
    range the dtype cannot hold, a span above 2**63)."""
    if len(bounds) > 2:
        raise TypeError(f"random_: expects at most two bounds (from_, to), got {bounds}")
    for b in (*bounds, to):
        if b is not None and (isinstance(b, bool) or not isinstance(b, numbers.Integral)):
            raise TypeError(f"random_: bounds must be integers, got {b!r}")
    d = t.dtype
    top = {"float32": 1 << 24, "float64": 1 << 53, "bool": 1}.get(d.name)
    top = int(np.iinfo(d.np).max) if top is None else top  # the largest value drawn by random_()
    if len(bounds) == 2:
        low, high = bounds[0], bounds[1] if bounds[1] is not None else to
    elif len(bounds) == 1:
        low, high = (bounds[0], to) if to is not None else (0, bounds[0])
    else:
        low, high = 0, to
    low, high = int(low), top + 1 if high is None else int(high)
    if low >= high:
        raise ArgumentError(f"random_: expects 'from' to be less than 'to', got from={low} >= to={high}")
    bottom = 0 if d is dt.bool_ else -top - 1 if d.category == 1 else -top
    if low < bottom or high - 1 > top or high - low > 1 << 63:
        raise ArgumentError(f"random_: the range [{low}, {high}) does not fit {d.name} or spans more than 2**63 values")
    return t._assign(uniform_integers(t, t.shape, low, high, d, t.device, resolve(generator, "random_")))


def exponential_(t, lambd: float, generator):
    """``Tensor.exponential_``: ``-log(1 - u) / lambd`` (inverse transform; ``1 - u`` lies in
    (0, 1], so every value is finite and >= 0).

    Raises DTypeError (not a float tensor), ValueError (``lambd <= 0``), TypeError (generator)."""
    d = _float_dtype(t, "exponential_")
    if not lambd > 0:
        raise ArgumentError(f"exponential_: expects lambd > 0.0, got lambd={lambd}")
    u = source(t, "rand", t.shape, d, t.device, resolve(generator, "exponential_"))
    return t._assign((1.0 - u).log() * (-1.0 / lambd))


def multinomial_(t, num_samples: int, replacement: bool, generator):
    """``Tensor.multinomial``: :func:`multinomial` on ``t``'s values (a sync point), int64 on
    ``t``'s device. Raises DTypeError for integer weights, and as :func:`multinomial`."""
    _float_dtype(t, "multinomial")
    if t.ndim not in (1, 2):
        raise ShapeError(f"multinomial: expected a 1-D or 2-D tensor of probabilities, got shape {t.shape}")
    index = multinomial(t.numpy(), num_samples, replacement, resolve(generator, "multinomial"))
    return t.new_tensor(index, dtype=dt.int64)
