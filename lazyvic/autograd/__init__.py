"""Reverse-mode autograd over the lazy graph (``torch.autograd``'s names).

- :mod:`lazyvic.autograd.engine`: the backward walk (``backward``, ``grad``), tensor hooks and
  ``retain_grad``;
- :mod:`lazyvic.autograd.function`: custom differentiable functions (``Function``);
- the grad-mode switches (``no_grad``, ``enable_grad``, ``set_grad_enabled``,
  ``inference_mode``) live in :mod:`lazyvic.modes`, below the front end, and are re-exported here.
"""

from lazyvic.autograd import function, functional
from lazyvic.autograd.engine import RemovableHandle, backward, grad
from lazyvic.autograd.function import Function, FunctionCtx, once_differentiable
from lazyvic.modes import (
    enable_grad,
    in_backward,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)

__all__ = [
    "Function",
    "FunctionCtx",
    "RemovableHandle",
    "backward",
    "enable_grad",
    "function",
    "functional",
    "grad",
    "in_backward",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "once_differentiable",
    "set_grad_enabled",
]
