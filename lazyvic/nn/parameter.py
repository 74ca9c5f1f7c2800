"""``lazyvic.nn.parameter``: PyTorch's ``torch.nn.parameter`` module path
(``from torch.nn.parameter import Parameter`` in real scripts)."""

from lazyvic.nn.lazy import UninitializedParameter, is_lazy
from lazyvic.nn.module import Parameter

__all__ = ["Parameter", "UninitializedParameter", "is_lazy"]
