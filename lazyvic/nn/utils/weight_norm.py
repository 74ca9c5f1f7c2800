"""``torch.nn.utils.weight_norm`` / ``remove_weight_norm``: a weight as a direction and a length.

Salimans & Kingma, "Weight Normalization" (2016): ``w = g * v / ||v||``, the norm over every
axis but ``dim`` (``dim=None``: the whole tensor). As PyTorch's (deprecated but common) function:
the module's parameter ``name`` is replaced by two parameters, ``name + "_g"`` (the lengths,
``w``'s shape with 1 on every axis but ``dim``) and ``name + "_v"`` (the direction, ``w``'s
shape), their names in ``state_dict`` as PyTorch's, and a forward pre-hook computes ``name`` from
them before each ``forward`` (lazily: the product fuses into the step's plan).
"""

from __future__ import annotations

from lazyvic.errors import ArgumentError
from lazyvic.nn.module import Module, Parameter


def _norm_except_dim(v, dim):
    if dim is None:
        return (v * v).sum().sqrt()
    axes = tuple(a for a in range(v.ndim) if a != dim)
    return (v * v).sum(axes, keepdim=True).sqrt() if axes else v.abs()


class _WeightNorm:
    # Its work is ops on the module's parameters, recorded into the call's trace: a call through
    # lazyvic.compile replays them (lazyvic.nn.Module._call_with_hooks).
    _lazyvic_pure = True

    def __init__(self, name: str, dim):
        self.name, self.dim = name, dim

    def compute(self, module: Module):
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    def __call__(self, module: Module, args) -> None:
        setattr(module, self.name, self.compute(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparameterize ``module``'s parameter ``name`` as ``g * v / ||v||`` (see the module
    docstring); ``dim`` may be negative. Returns ``module``. Raises ArgumentError when the
    parameter does not exist or already has weight norm, or ``dim`` is out of range."""
    weight = module._parameters.get(name)
    if weight is None:
        raise ArgumentError(f"weight_norm: {type(module).__name__} has no parameter {name!r}")
    if name in module.__dict__.get("_weight_norms", {}):
        raise ArgumentError(f"weight_norm: {type(module).__name__}.{name} already has weight norm")
    if dim is not None:
        if not -weight.ndim <= dim < max(weight.ndim, 1):
            raise ArgumentError(f"weight_norm: dim {dim} out of range for {name} of shape {weight.shape}")
        dim = dim % weight.ndim if weight.ndim else None
    fn = _WeightNorm(name, dim)
    w = weight.detach()
    del module._parameters[name]
    setattr(module, name + "_g", Parameter(_norm_except_dim(w, dim)))
    setattr(module, name + "_v", Parameter(w))
    setattr(module, name, fn.compute(module))
    handle = module.register_forward_pre_hook(fn)
    module.__dict__.setdefault("_weight_norms", {})[name] = (fn, handle)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo :func:`weight_norm`: ``name`` is a parameter again, holding ``g * v / ||v||`` now.
    Raises ArgumentError when ``name`` has no weight norm."""
    norms = module.__dict__.get("_weight_norms", {})
    if name not in norms:
        raise ArgumentError(f"remove_weight_norm: {type(module).__name__}.{name} has no weight norm")
    fn, handle = norms.pop(name)
    weight = fn.compute(module).detach()
    handle.remove()
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    module.__dict__.pop(name, None)
    setattr(module, name, Parameter(weight))
    return module


__all__ = ["weight_norm", "remove_weight_norm"]
