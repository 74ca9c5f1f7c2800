"""Gradient utilities."""

from __future__ import annotations

from lazyvic import autograd
from lazyvic.creation import zeros
from lazyvic.tensor import Tensor


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0):
    """Scale gradients so their global L2 norm is at most ``max_norm``; returns the norm (lazy)."""
    if norm_type != 2.0:
        raise ValueError("clip_grad_norm_: only norm_type=2 is supported")
    if isinstance(parameters, Tensor):  # one tensor, as PyTorch accepts
        parameters = [parameters]
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return zeros(())
    with autograd.no_grad():
        total = None
        for p in params:
            s = (p.grad * p.grad).sum()
            total = s if total is None else total + s
        norm = total.sqrt()
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad = p.grad * scale
    return norm
