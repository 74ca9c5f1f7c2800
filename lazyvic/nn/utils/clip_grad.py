"""Gradient clipping (``torch.nn.utils.clip_grad``): lazy ops under no_grad, so clipping fuses
into the training step's plan; ``max_norm`` and ``clip_value`` are scalar inputs (changing them
does not recompile)."""

from __future__ import annotations

import math
from typing import Iterable

from lazyvic import autograd
from lazyvic.creation import zeros
from lazyvic.errors import AutogradError
from lazyvic.tensor import Tensor


def _tensors(parameters) -> list:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _norm(g: Tensor, p: float) -> Tensor:
    """The vector p-norm of ``g`` (``torch.linalg.vector_norm``): p = inf: max |g|, -inf:
    min |g|, 0: the count of non-zeros, else (sum |g|^p)^(1/p)."""
    if p == 2.0:
        return (g * g).sum().sqrt()
    if p == math.inf:
        return g.abs().amax()
    if p == -math.inf:
        return g.abs().amin()
    if p == 0.0:
        return (g != 0).to(g.dtype).sum()
    if p == 1.0:
        return g.abs().sum()
    return (g.abs() ** p).sum() ** (1.0 / p)


def get_total_norm(
    tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: bool | None = None
) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` together, as if concatenated into one vector
    (``torch.nn.utils.get_total_norm``); a 0-d tensor of their dtype (lazy, unless
    ``error_if_nonfinite`` has to look at it). ``foreach`` is accepted and ignored (the ops fuse
    either way).

    Raises:
        ValueError: ``norm_type`` is not a number or ``"inf"``.
        AutogradError: ``error_if_nonfinite`` and the norm is NaN or infinite (a sync point).
    """
    try:
        p = float(norm_type)
    except (TypeError, ValueError):
        raise ValueError(f"get_total_norm: norm_type must be a number or 'inf', got {norm_type!r}") from None
    tensors = [t for t in _tensors(tensors) if t is not None]
    if not tensors:
        return zeros(())
    with autograd.no_grad():
        if p == 2.0:  # one sum of squares over everything (no per-tensor square roots)
            total = None
            for t in tensors:
                s = (t * t).sum()
                total = s if total is None else total + s
            norm = total.sqrt()
        else:
            norms = [_norm(t, p) for t in tensors]
            if p == math.inf:
                norm = norms[0]
                for n in norms[1:]:
                    norm = norm.maximum(n)
            elif p == -math.inf:
                norm = norms[0]
                for n in norms[1:]:
                    norm = norm.minimum(n)
            elif p == 0.0:
                norm = sum(norms[1:], norms[0])
            else:
                total = sum((n**p for n in norms[1:]), norms[0] ** p)
                norm = total ** (1.0 / p)
    if error_if_nonfinite and not math.isfinite(float(norm.item())):
        raise AutogradError(
            f"clip_grad_norm_: the total norm of order {p} of the gradients is non-finite ({norm.item()}), "
            f"so it cannot be clipped; pass error_if_nonfinite=False to clip anyway"
        )
    return norm


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach: bool | None = None) -> None:
    """Scale the gradients of ``parameters`` in place by ``min(1, max_norm / (total_norm + 1e-6))``
    (``torch.nn.utils.clip_grads_with_norm_``)."""
    params = [p for p in _tensors(parameters) if p.grad is not None]
    if not params:
        return
    with autograd.no_grad():
        scale = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad.mul_(scale)


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scale the gradients in place so that their total ``norm_type``-norm (all gradients seen
    as one vector) is at most ``max_norm`` (``torch.nn.utils.clip_grad_norm_``): each gradient
    is multiplied by ``min(1, max_norm / (total_norm + 1e-6))``. ``norm_type`` may be any
    p > 0, ``inf`` / ``"inf"`` or 0. Returns the total norm before clipping (a 0-d tensor of the
    gradients' dtype; lazy). Parameters without a gradient are skipped.

    Raises:
        ValueError: a ``norm_type`` that is not a number.
        AutogradError: ``error_if_nonfinite=True`` and the norm is NaN or infinite (this check
            is a sync point, as on PyTorch's GPUs).
    """
    params = [p for p in _tensors(parameters) if p.grad is not None]
    norm = get_total_norm([p.grad for p in params], norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(params, max_norm, norm, foreach)
    return norm


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient in place to ``[-clip_value, clip_value]``
    (``torch.nn.utils.clip_grad_value_``); parameters without a gradient are skipped."""
    clip_value = float(clip_value)
    with autograd.no_grad():
        for p in _tensors(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]
