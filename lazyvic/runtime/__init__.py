"""Runtime: plan cache, executor, interpreter, metrics (the only mutable global state)."""

from lazyvic.runtime.plan_cache import plan_cache, run

__all__ = ["plan_cache", "run"]
