"""Pending graph and traces: Node, the cut, the canonical Trace (builds, runs nothing)."""

from lazyvic.trace.node import Node, live_nodes_count
from lazyvic.trace.cut import Trace, cut

__all__ = ["Node", "Trace", "cut", "live_nodes_count"]
