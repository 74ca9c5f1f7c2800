"""``lazyvic.cuda.amp``: PyTorch's deprecated ``torch.cuda.amp`` spellings of
:class:`lazyvic.amp.autocast` and :class:`lazyvic.amp.GradScaler`, with their signatures (no
device argument) and PyTorch's FutureWarning. They behave as the ``lazyvic.amp`` classes for
``"cuda"`` (the same rounding on every device, see :mod:`lazyvic.amp`)."""

from __future__ import annotations

import warnings

from lazyvic import amp
from lazyvic.dtypes import float16


class autocast(amp.autocast):  # noqa: N801 - PyTorch's name
    """``torch.cuda.amp.autocast(enabled=True, dtype=float16, cache_enabled=True)``: deprecated,
    warns FutureWarning; use ``lazyvic.amp.autocast("cuda", ...)``."""

    def __init__(self, enabled: bool = True, dtype=float16, cache_enabled: bool = True):
        warnings.warn(
            "`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` "
            "instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(amp.GradScaler):
    """``torch.cuda.amp.GradScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5,
    growth_interval=2000, enabled=True)``: deprecated, warns FutureWarning; use
    ``lazyvic.amp.GradScaler("cuda", ...)``."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        warnings.warn(
            "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` "
            "instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


__all__ = ["autocast", "GradScaler"]
