"""Composite marks: the single ONNX node behind a function built from primitives.

Exported primitive by primitive, a composite (softmax, conv2d's im2col, cat, an
embedding lookup) becomes a long chain of ONNX nodes that other tools neither
recognise nor run fast. While an ONNX export records (:func:`recording`), such a
function marks its result with the one ONNX node that computes it; the exporter
emits that node and skips the primitives behind the result. Outside an export
:func:`mark` returns its argument after one test, and nothing enters the trace or
its key.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

_marks: dict | None = None  # Node -> Composite while an export records, else None
# Constants that depend only on sizes (arange, causal masks), with the ONNX nodes that compute
# them from those sizes; an export with dynamic axes uses them. Weak: a dropped constant goes.
_recipes: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Composite:
    """One ONNX node that computes a marked result.

    Attributes:
        op_type: the ONNX operator, e.g. ``"Conv"``; or a function ``(builder, input names,
            attrs) -> output name`` that emits several nodes (returning None writes the
            primitives, or the constant, instead).
        inputs: the Nodes of its inputs in ONNX order; None for an omitted optional input.
        attrs: the ONNX attributes.
        min_opset: the first opset that has the operator with these semantics; below it the
            exporter writes the primitives instead (LayerNormalization is opset 17, Gelu 20).
    """

    op_type: str
    inputs: tuple
    attrs: dict = field(default_factory=dict)
    min_opset: int = 1


def mark(result, op_type: str, inputs: tuple, min_opset: int = 1, **attrs):
    """Record that ``result`` (a Tensor) is ``op_type(*inputs, **attrs)`` when an export records;
    return ``result`` unchanged."""
    if _marks is not None:
        nodes = tuple(None if t is None else t._node for t in inputs)
        if result._node not in nodes:  # a composite that was the identity (e.g. pooling 1x1 to 1x1)
            _marks[result._node] = Composite(op_type, nodes, dict(attrs), min_opset)
    return result


def recipe(constant, emit, **attrs):
    """Record that the realized Tensor ``constant`` is ``emit(builder, [], attrs)`` in an ONNX graph,
    where ``attrs`` are the sizes it was built from; returns ``constant``. Exports with dynamic
    axes write the recipe when those sizes change with an axis, and the constant otherwise."""
    _recipes[constant._node] = Composite(emit, (), dict(attrs))
    return constant


def recipe_of(node):
    """The recipe recorded for a constant's node, or None."""
    return _recipes.get(node)


def active() -> bool:
    """True while an export records (callers may skip work that only the export needs)."""
    return _marks is not None


@contextmanager
def recording():
    """Collect marks made inside the block; yields the ``{Node: Composite}`` dict."""
    global _marks
    previous, _marks = _marks, {}
    try:
        yield _marks
    finally:
        _marks = previous
