"""One flat vector from many parameters and back (``torch.nn.utils.convert_parameters``)."""

from __future__ import annotations

from typing import Iterable

from lazyvic.errors import ShapeError
from lazyvic.indexing import cat
from lazyvic.tensor import Tensor


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All ``parameters`` flattened and concatenated in order: shape ``(sum of numels,)``,
    their dtype; differentiable (it records ops like any other)."""
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Give each parameter in turn the next ``p.numel()`` values of ``vec``, reshaped to its
    shape (``p.data = ...``, as PyTorch: no history).

    Raises:
        TypeError: ``vec`` is not a tensor.
        ShapeError: ``vec`` is not 1-D, or its length is not the parameters' total size.
    """
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected a Tensor, but got {type(vec).__name__}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ShapeError(
            f"vector_to_parameters: expected a 1-D vector of {total} values (the parameters' sizes "
            f"{[p.shape for p in params]}), got shape {vec.shape}"
        )
    start = 0
    for p in params:
        n = p.numel()
        p.data = vec[start : start + n].reshape(p.shape).detach().to(p.dtype)
        start += n


__all__ = ["parameters_to_vector", "vector_to_parameters"]
