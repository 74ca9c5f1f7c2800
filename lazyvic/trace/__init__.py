"""Pending graph and traces: Node, the cut, the canonical Trace (builds, runs nothing)."""

from lazyvic.trace.cut import Trace, cut
from lazyvic.trace.node import Node

__all__ = ["Node", "Trace", "cut"]
