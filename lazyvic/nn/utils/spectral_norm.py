"""``torch.nn.utils.spectral_norm`` / ``remove_spectral_norm``: a weight divided by its largest
singular value, estimated by power iteration (Miyato et al., "Spectral Normalization for
Generative Adversarial Networks", 2018).

As PyTorch's function: the parameter ``name`` becomes ``name + "_orig"``, the buffers
``name + "_u"`` and ``name + "_v"`` hold the singular-vector estimates (their state_dict names as
PyTorch's), and a forward pre-hook sets ``name = orig / sigma`` before each ``forward``, with
``sigma = u . (W v)`` for the weight as a matrix W (axis ``dim`` first, the rest flattened). In
training mode the hook first runs ``n_power_iterations`` of ``v = normalize(W^T u)``,
``u = normalize(W v)`` (no gradient; the buffers updated in place); in eval mode it uses the
stored vectors. ``normalize`` divides by ``max(||x||, eps)``. The vectors start as normalized
standard-normal draws from lazyvic's seeded generator (so not PyTorch's values).
"""

from __future__ import annotations

from lazyvic import modes
from lazyvic.errors import ArgumentError
from lazyvic.nn.module import Module, Parameter
from lazyvic.random import randn


def _normalize(x, eps: float):
    return x / (x * x).sum().sqrt().clamp(min=eps)


class _SpectralNorm:
    # Ops on the module's parameter and buffers only (the buffers' updates are recorded as in
    # place changes): a call through lazyvic.compile replays them (Module._call_with_hooks).
    _lazyvic_pure = True

    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float):
        self.name, self.n, self.dim, self.eps = name, n_power_iterations, dim, eps

    def matrix(self, weight):
        w = weight if self.dim == 0 else weight.movedim(self.dim, 0)
        return w.reshape(w.shape[0], -1)

    def compute(self, module: Module, power: bool):
        orig = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.matrix(orig)
        if power:
            with modes.no_grad():
                w = mat.detach()
                for _ in range(self.n):
                    v = _normalize(w.T @ u, self.eps)
                    u = _normalize(w @ v, self.eps)
                getattr(module, self.name + "_u")._assign(u)
                getattr(module, self.name + "_v")._assign(v)
            u, v = u.detach(), v.detach()
        sigma = (u * (mat @ v)).sum()
        return orig / sigma

    def __call__(self, module: Module, args) -> None:
        setattr(module, self.name, self.compute(module, module.training))


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None
) -> Module:
    """Spectral normalization of ``module``'s parameter ``name`` (see the module docstring);
    ``dim`` defaults to 1 for transposed convolutions, else 0. Returns ``module``. Raises
    ArgumentError when the parameter does not exist or already has spectral norm, or for
    ``n_power_iterations`` below 1."""
    weight = module._parameters.get(name)
    if weight is None:
        raise ArgumentError(f"spectral_norm: {type(module).__name__} has no parameter {name!r}")
    if name in module.__dict__.get("_spectral_norms", {}):
        raise ArgumentError(f"spectral_norm: {type(module).__name__}.{name} already has spectral norm")
    if n_power_iterations < 1:
        raise ArgumentError(f"spectral_norm: n_power_iterations must be at least 1, got {n_power_iterations}")
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    fn = _SpectralNorm(name, n_power_iterations, dim % max(weight.ndim, 1), eps)
    with modes.no_grad():
        mat = fn.matrix(weight.detach())
        h, w = mat.shape
        u = _normalize(randn(h, dtype=weight.dtype, device=weight.device), eps)
        v = _normalize(randn(w, dtype=weight.dtype, device=weight.device), eps)
    del module._parameters[name]
    setattr(module, name + "_orig", Parameter(weight.detach(), weight.requires_grad))
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    handle = module.register_forward_pre_hook(fn)
    module.__dict__.setdefault("_spectral_norms", {})[name] = (fn, handle)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo :func:`spectral_norm`: ``name`` is a parameter again, holding ``orig / sigma`` for the
    stored vectors. Raises ArgumentError when ``name`` has no spectral norm."""
    norms = module.__dict__.get("_spectral_norms", {})
    if name not in norms:
        raise ArgumentError(f"remove_spectral_norm: {type(module).__name__}.{name} has no spectral norm")
    fn, handle = norms.pop(name)
    weight = fn.compute(module, False).detach()
    handle.remove()
    del module._parameters[name + "_orig"], module._buffers[name + "_u"], module._buffers[name + "_v"]
    module.__dict__.pop(name, None)
    setattr(module, name, Parameter(weight))
    return module


__all__ = ["spectral_norm", "remove_spectral_norm"]
