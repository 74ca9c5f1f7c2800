"""Random numbers: the seeded counter-based generator and the random creation functions.

Random ops are nodes with (seed, offset) scalar inputs, evaluated by the Philox4x32-10
generator inside the kernels (``lazyvic.ops.source``; Salmon et al., SC'11), so a seeded run
gives the same numbers, bit for bit, on every run and on both devices. Each op takes
``numel`` words from the stream (rounded up to whole Philox blocks), so later ops draw new
numbers. ``manual_seed``, ``initial_seed``, ``get_rng_state`` and ``set_rng_state`` work as in
PyTorch.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError
from lazyvic.ops.source import uniform_bits
from lazyvic.shapes import shape_arg
from lazyvic.tensor import Tensor, to_operand
from lazyvic.transfer import device_arg, placed


class Generator:
    """(seed, offset) of the counter-based Philox generator; ``default_generator`` is the
    global one that ``manual_seed`` seeds and every random op draws from."""

    default_seed = 67280421310721  # PyTorch's default initial seed

    def __init__(self):
        self.seed = self.default_seed
        self.offset = 0

    def take(self, n: int) -> tuple:
        off = self.offset
        self.offset += (n + 3) // 4 * 4
        return self.seed, off


default_generator = Generator()  # PyTorch's name: the global generator


def manual_seed(seed: int) -> None:
    """Seed the global generator: the same seed gives the same random numbers, bit for bit."""
    default_generator.seed = int(seed) & 0x7FFFFFFFFFFFFFFF
    default_generator.offset = 0


def initial_seed() -> int:
    return default_generator.seed


def get_rng_state() -> Tensor:
    """The global generator's state: an int64 tensor ``[seed, offset]`` (offset counts the
    32-bit Philox words drawn so far). Save it with a checkpoint to resume exactly."""
    return Tensor(np.array([default_generator.seed, default_generator.offset], dtype=np.int64))


def set_rng_state(state) -> None:
    """Restore a state from :func:`get_rng_state` (a tensor, array or pair of ints).

    Raises ValueError for anything but two non-negative integers."""
    arr = np.asarray(state.numpy() if isinstance(state, Tensor) else state)
    if arr.shape != (2,) or arr.dtype.kind not in "iu" or (arr < 0).any() or int(arr[0]) >= 1 << 63:
        raise ValueError(
            f"set_rng_state: expected [seed, offset] as two non-negative integers with seed < 2**63, got {arr!r}"
        )
    default_generator.seed, default_generator.offset = int(arr[0]), int(arr[1])


def _float_dtype(dtype) -> dt.DType:
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    if not d.is_floating_point:
        raise DTypeError(f"expected a floating-point dtype, got {d.name}")
    return d


def _random(opname: str, shape: tuple, dtype, requires_grad: bool, device) -> Tensor:
    d = _float_dtype(dtype)
    place = device_arg(device, opname)
    seed, offset = default_generator.take(math.prod(shape) + 1)
    s, o = to_operand(seed, dt.int64), to_operand(offset, dt.int64)
    out = Tensor.apply(opname, s, o, device=place, shape=shape, dtype=d)
    out.requires_grad = requires_grad
    return out


def rand(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Uniform [0, 1) numbers from the seeded Philox stream (lazy; the same numbers on
    every device)."""
    return _random("rand", shape_arg(size), dtype, requires_grad, device)


def randn(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Standard normal numbers (Box-Muller over the seeded Philox stream; lazy)."""
    return _random("randn", shape_arg(size), dtype, requires_grad, device)


def rand_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return rand(*x.shape, dtype=dtype or x.dtype, device=device or x.device)


def randn_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return randn(*x.shape, dtype=dtype or x.dtype, device=device or x.device)


def randint(low: int, high: int | None = None, size=(), dtype=None, device=None) -> Tensor:
    """Integers uniform in [low, high) (int64 by default)."""
    if high is None:
        low, high = 0, low
    u = rand(*size, dtype=dt.float64, device=device)
    return (u * (high - low)).to(dt.int64).clamp(max=high - low - 1).to(dtype or dt.int64) + low


def randperm(n: int, dtype=None, device=None) -> Tensor:
    """A random permutation of 0..n-1 from the seeded stream (computed now: its order is data)."""
    place = device_arg(device, "randperm")
    seed, offset = default_generator.take(n)
    keys = uniform_bits(n, seed, offset)
    perm = np.argsort(keys, kind="stable").astype(np.int64)
    return placed(Tensor(perm, dtype=dtype or dt.int64), place)
