"""PyTorch's type queries as module functions: ``is_tensor``, ``is_floating_point``, ``numel``."""

from __future__ import annotations

from lazyvic.tensor import Tensor


def is_tensor(obj) -> bool:
    """True when ``obj`` is a lazyvic Tensor (an ``nn.Parameter`` is one)."""
    return isinstance(obj, Tensor)


def is_floating_point(input: Tensor) -> bool:  # noqa: A002 - PyTorch's argument name
    """True when ``input``'s dtype is a floating-point one (float32, float64).

    Raises TypeError when ``input`` is not a Tensor (as PyTorch does)."""
    _check("is_floating_point", input)
    return input.dtype.is_floating_point


def numel(input: Tensor) -> int:  # noqa: A002
    """The number of elements of ``input`` (1 for a 0-d tensor).

    Raises TypeError when ``input`` is not a Tensor (as PyTorch does)."""
    _check("numel", input)
    return input.numel()


def _check(opname: str, obj) -> None:
    if not isinstance(obj, Tensor):
        raise TypeError(f"{opname}(): argument 'input' must be a Tensor, not {type(obj).__name__}")
