"""Random numbers: seeding and the random functions (PyTorch's names, signatures and defaults).

Every function draws from a :class:`lazyvic.Generator` (``generator=``; by default the global
``default_generator`` that :func:`manual_seed` seeds) over the counter-based Philox4x32-10 stream
(:mod:`lazyvic.generator`; Salmon et al., SC'11), so a seeded run gives the same numbers, bit for
bit, on every run and on both devices. The elementwise draws (``rand``, ``randn``, ``randint``,
``normal``, ``bernoulli``) are lazy ``rand``/``randn`` nodes with the stream position as scalar
inputs: they fuse with what reads them and never recompile for a new seed. Each takes ``numel``
words from the stream (rounded up to whole Philox blocks), so later draws get new numbers. The
draws whose result is an order (``randperm``, ``multinomial``) are computed now from the same
stream (``multinomial`` is a sync point for its input).
"""

from __future__ import annotations

import contextlib
import numbers

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.generator import Generator, default_generator, permutation, resolve, source, uniform_integers
from lazyvic.shapes import broadcast_shapes
from lazyvic.tensor import Tensor, to_operand
from lazyvic.transfer import device_arg, placed

Generator.tensor_type = Tensor  # get_state returns a Tensor (lazyvic.generator sits below lazyvic.tensor)


def manual_seed(seed) -> Generator:
    """Seed the global generator (the same seed gives the same random numbers, bit for bit, on every
    device); returns it, as PyTorch does. Seeds are taken modulo 2**63."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """Seed the global generator with a non-deterministic number and return it."""
    return default_generator.seed()


def initial_seed() -> int:
    """The seed the global generator was last seeded with."""
    return default_generator.initial_seed()


def get_rng_state() -> Tensor:
    """The global generator's state: an int64 tensor ``[seed, offset]`` (offset counts the
    32-bit Philox words drawn so far). Save it with a checkpoint to resume exactly."""
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    """Restore a state from :func:`get_rng_state` (a tensor, array or pair of ints).

    Raises ValueError for anything but two non-negative integers (seed < 2**63)."""
    default_generator.set_state(new_state, _opname="set_rng_state")


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, device_type: str = "cuda"):
    """PyTorch's ``torch.random.fork_rng``: inside the block the global generator may be reseeded
    or drawn from; on exit its state is restored. ``devices`` and ``device_type`` are accepted
    (lazyvic has one stream for every device)."""
    if not enabled:
        yield
        return
    state = (default_generator.initial_seed(), default_generator.get_offset())
    try:
        yield
    finally:
        default_generator.manual_seed(state[0]).set_offset(state[1])


# ------------------------------------------------------------------ helpers
def _size(opname: str, args: tuple, size) -> tuple:
    """The shape from ``f(2, 3)``, ``f((2, 3))`` or ``f(size=(2, 3))``.

    Raises TypeError for a size that is not ints, ShapeError for a negative one."""
    if size is not None:
        if args:
            raise TypeError(f"{opname}: got the size both as positional arguments {args} and as size={size}")
        args = (size,)
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    shape = []
    for s in args:
        if isinstance(s, bool) or not isinstance(s, (numbers.Integral, Tensor)):
            raise TypeError(f"{opname}: size must be ints or a tuple of ints, got {args!r}")
        shape.append(int(s))
    if any(s < 0 for s in shape):
        raise ShapeError(f"{opname}: negative dimension in size {tuple(shape)}")
    return tuple(shape)


def _float_dtype(opname: str, dtype) -> dt.DType:
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    if not d.is_floating_point:
        raise DTypeError(f"{opname}: expected a floating-point dtype, got {d.name}")
    return d


def _random(opname: str, shape: tuple, dtype, requires_grad: bool, device, generator) -> Tensor:
    d = _float_dtype(opname, dtype)
    out = source(Tensor, opname, shape, d, device_arg(device, opname), resolve(generator, opname))
    out.requires_grad = bool(requires_grad)
    return out


def _integer(opname: str, value) -> int:
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or int(value) != value:
        raise TypeError(f"{opname}: expected an integer bound, got {value!r}")
    return int(value)


# ----------------------------------------------------------- random creation
def rand(*size, generator=None, dtype=None, device=None, requires_grad: bool = False, **kwargs) -> Tensor:
    """Uniform numbers in [0, 1) of shape ``size`` (``rand(2, 3)``, ``rand((2, 3))`` or
    ``rand(size=(2, 3))``), float32 by default (float64 allowed): 24 random bits per float32,
    32 per float64. Lazy; the same numbers on every device.

    Raises:
        TypeError: a size that is not ints, or a generator that is not a ``lazyvic.Generator``.
        ShapeError: a negative size. DTypeError: a non-float ``dtype``. DeviceError: a bad device.
    """
    shape = _size("rand", size, _size_kwarg("rand", kwargs))
    return _random("rand", shape, dtype, requires_grad, device, generator)


def randn(*size, generator=None, dtype=None, device=None, requires_grad: bool = False, **kwargs) -> Tensor:
    """Standard normal numbers of shape ``size`` (forms as :func:`rand`): the Box-Muller transform
    (Box & Muller, Ann. Math. Statist. 1958) of pairs of 32-bit uniforms, computed in float64 and
    rounded once. Lazy. Raises as :func:`rand`."""
    shape = _size("randn", size, _size_kwarg("randn", kwargs))
    return _random("randn", shape, dtype, requires_grad, device, generator)


def _size_kwarg(opname: str, kwargs: dict):
    """``size=`` (PyTorch's keyword, also the name of ``*size``) from the other keywords; ``out=``,
    ``layout=`` (other than strided) and ``pin_memory=True`` raise TypeError naming ``opname``."""
    size = kwargs.pop("size", None)
    for name in ("out", "layout", "pin_memory"):
        value = kwargs.pop(name, None)
        if value is not None and value is not False and not (name == "layout" and str(value).endswith("strided")):
            raise TypeError(f"{opname}: {name}= is not supported by lazyvic")
    if kwargs:
        raise TypeError(f"{opname}: unexpected keyword arguments {sorted(kwargs)}")
    return size


def rand_like(input: Tensor, *, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """:func:`rand` with ``input``'s shape, and its dtype and device unless given."""
    d, place = dtype or input.dtype, device or input.device
    return rand(input.shape, generator=generator, dtype=d, device=place, requires_grad=requires_grad)


def randn_like(input: Tensor, *, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """:func:`randn` with ``input``'s shape, and its dtype and device unless given."""
    d, place = dtype or input.dtype, device or input.device
    return randn(input.shape, generator=generator, dtype=d, device=place, requires_grad=requires_grad)


def randint(
    *args, size=None, low=None, high=None, generator=None, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    """Integers uniform in ``[low, high)``: PyTorch's ``randint(high, size)`` and
    ``randint(low, high, size)`` (also with ``low=``, ``high=``, ``size=`` as keywords). int64 by
    default; any lazyvic dtype. Lazy: ``floor(u * (high - low)) + low`` with ``u`` a float64
    uniform of 32 random bits, so ranges wider than 2**32 are covered with a step of
    ``(high - low) / 2**32``.

    Raises:
        TypeError: missing or extra arguments, non-integer bounds, a size that is not ints.
        ValueError: ``high <= low``. ShapeError: a negative size.
        DTypeError: ``requires_grad`` with an integer dtype.
    """
    args = list(args)
    if size is None:
        if not args:
            raise TypeError("randint: missing the size argument: randint(high, size) or randint(low, high, size)")
        size = args.pop()
    if high is None:
        if not args:
            raise TypeError("randint: missing the high argument: randint(high, size) or randint(low, high, size)")
        high = args.pop()
    if low is None:
        low = args.pop() if args else 0
    if args:
        raise TypeError("randint: too many positional arguments: randint(high, size) or randint(low, high, size)")
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint: size must be a tuple of ints, got {size!r}")
    shape = _size("randint", (size,), None)
    low, high = _integer("randint", low), _integer("randint", high)
    if high <= low:
        raise ArgumentError(f"randint: expects low < high, got low={low}, high={high}")
    d = dt.get_dtype(dtype) if dtype is not None else dt.int64
    if requires_grad and not d.is_floating_point:
        raise DTypeError(f"randint: only floating-point tensors can require grad, got dtype {d.name}")
    place = device_arg(device, "randint")
    out = uniform_integers(Tensor, shape, low, high, d, place, resolve(generator, "randint"))
    out.requires_grad = bool(requires_grad)
    return out


def randint_like(input: Tensor, low=0, high=None, *, generator=None, dtype=None, device=None) -> Tensor:
    """:func:`randint` with ``input``'s shape (``randint_like(x, high)`` or ``(x, low, high)``),
    and its dtype and device unless given."""
    if high is None:
        low, high = 0, low
    d, place = dtype or input.dtype, device or input.device
    return randint(low, high, input.shape, generator=generator, dtype=d, device=place)


def randperm(n: int, *, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A random permutation of ``0..n-1`` (int64 by default), computed now from the seeded stream
    (its order is data): the order that stably sorts ``n`` words of the stream.

    Raises TypeError for a non-integer ``n``, ValueError for a negative one."""
    n = _integer("randperm", n)
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    place = device_arg(device, "randperm")
    perm = permutation(n, resolve(generator, "randperm"))
    out = placed(Tensor(perm, dtype=dtype or dt.int64), place)
    if requires_grad:
        out.requires_grad_(True)
    return out


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad: bool = False):
    """Normal numbers with mean ``mean`` and standard deviation ``std`` (PyTorch's forms):

    - ``normal(mean: Tensor, std: Tensor)``: the shapes broadcast together;
    - ``normal(mean: Tensor, std=1.0)`` / ``normal(mean: float, std: Tensor)``: the tensor's shape;
    - ``normal(mean: float, std: float, size)``: shape ``size``, float32 unless ``dtype``;
      ``dtype``, ``device`` and ``requires_grad`` apply to this form only.

    ``randn * std + mean`` over the seeded stream (lazy). The result carries no gradient to
    ``mean`` or ``std`` (PyTorch's gradient for them is zero).

    Raises:
        TypeError: two numbers without ``size``, a ``size`` with a tensor, a bad generator.
        ValueError: a negative ``std`` (a tensor ``std`` is checked when it is realized data).
        DTypeError: an integer tensor. ShapeError: shapes that do not broadcast.
    """
    gen = resolve(generator, "normal")
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError("normal: normal(mean: float, std: float) needs a size: normal(mean, std, size)")
        _check_std(std)
        shape = _size("normal", (size,), None)
        out = _random("randn", shape, dtype, False, device, gen) * float(std) + float(mean)
        if requires_grad:
            out.requires_grad_(True)
        return out
    if size is not None:
        raise TypeError("normal: size= is only for normal(mean: float, std: float, size); a tensor gives the shape")
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    for t in tensors:
        if not t.dtype.is_floating_point:
            raise DTypeError(f"normal: mean and std must be floating-point tensors, got {t.dtype.name}")
    d = tensors[0].dtype if len(tensors) == 1 else dt.promote(tensors[0].dtype, tensors[1].dtype)
    shape = tensors[0].shape if len(tensors) == 1 else broadcast_shapes(mean.shape, std.shape, "normal")
    _check_std(std)
    noise = source(Tensor, "randn", shape, d, tensors[0].device, gen)
    m = mean.detach() if isinstance(mean, Tensor) else to_operand(float(mean), d)
    s = std.detach() if isinstance(std, Tensor) else float(std)
    return noise * s + m


def _check_std(std) -> None:
    values = _host_values(std)
    if values is not None and (values < 0).any():
        raise ArgumentError(f"normal: expects std >= 0.0, but found std {float(values[values < 0].ravel()[0])}")


def _host_values(x):
    """The values of a number, or of a tensor that is realized data on the CPU; else None (a
    pending tensor is not computed for a check)."""
    if isinstance(x, Tensor):
        node = x._node
        return node.data if node.op == "buffer" and node.device == "cpu" else None
    return np.asarray(x, dtype=np.float64)


def bernoulli(input: Tensor, p=None, *, generator=None) -> Tensor:
    """0/1 draws: ``out[i] = 1`` with probability ``input[i]`` (``bernoulli(probs)``), or with
    probability ``p`` for every element of ``input``'s shape (``bernoulli(input, p)``). The result
    has ``input``'s dtype and device; lazy (``rand < p``, 32 random bits per draw), no gradient.

    Raises:
        DTypeError: probabilities in an integer tensor.
        ValueError: a probability outside [0, 1] (a tensor is checked when it is realized data).
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli: expected a Tensor, got {type(input).__name__}")
    return input.bernoulli(p, generator=generator)


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None) -> Tensor:
    """Indices of categories drawn from the rows of ``input`` (PyTorch's ``torch.multinomial``):
    (C,) -> (num_samples,), (R, C) -> (R, num_samples), int64, on ``input``'s device. Weights
    need not sum to one. A sync point: computed now from the seeded stream (algorithms in
    :func:`lazyvic.generator.multinomial`).

    Raises:
        DTypeError: an integer ``input``. ShapeError: not 1-D or 2-D.
        ValueError: negative/inf/NaN weights, a zero row, too few categories without replacement.
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial: expected a Tensor, got {type(input).__name__}")
    return input.multinomial(num_samples, replacement, generator=generator)
