"""``lazyvic.distributions.kl``: PyTorch's module path of ``kl_divergence`` and ``register_kl``."""

from lazyvic.distributions import kl_divergence, register_kl

__all__ = ["kl_divergence", "register_kl"]
