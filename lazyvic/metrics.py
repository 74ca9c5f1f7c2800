"""``lazyvic.metrics``: the runtime's counters (code in :mod:`lazyvic.runtime.metrics`).

``import lazyvic.metrics`` works as a module import; the names are the runtime's own objects, so
``snapshot()``, ``reset()``, ``report()``, ``plans()`` and ``counters`` read and change the same
counters.
"""

from lazyvic.runtime.metrics import add, counters, fallback_ops, plans, report, reset, snapshot

__all__ = ["add", "counters", "fallback_ops", "plans", "report", "reset", "snapshot"]
