"""``lazyvic.utils.checkpoint``: PyTorch's activation checkpointing API, so scripts that use it run.

``checkpoint(fn, *args)`` returns ``fn(*args)``: the same values and the same gradients as
PyTorch's. It does not recompute the forward in the backward: lazyvic records the forward and
the backward into one lazy graph and fuses them into one plan, whose memory plan
(``lazyvic.explain``, ``plan.memory``) decides which intermediate values stay alive; there is no
separate store of saved activations to drop. A script that checkpoints to fit a model in memory
gets no saving from it here.
"""

from __future__ import annotations


def checkpoint(function, *args, use_reentrant: bool | None = None, preserve_rng_state: bool = True, **kwargs):
    """``function(*args, **kwargs)`` (see the module docstring). ``use_reentrant`` and
    ``preserve_rng_state`` are accepted for PyTorch's signature; random ops inside draw once, as
    an uncheckpointed call does. Other keyword arguments (``context_fn``, ``determinism_check``,
    ``debug``) raise TypeError, as unknown arguments do."""
    for name in ("context_fn", "determinism_check", "debug"):
        if name in kwargs:
            raise TypeError(f"checkpoint: lazyvic does not support {name!r}")
    return function(*args, **kwargs)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None, **kwargs):  # noqa: A002
    """The modules (an ``nn.Sequential`` or a list) applied in order to ``input``; ``segments``
    (at least 1) is accepted for PyTorch's signature (see the module docstring)."""
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be at least 1, got {segments}")
    mods = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for f in mods:
        input = f(input)
    return input


__all__ = ["checkpoint", "checkpoint_sequential"]
