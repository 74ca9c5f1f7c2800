"""The converter registry: ONNX op type -> the one converter that imports it, with its versions.

A converter is a function ``convert(ctx, *inputs)`` registered for one op type with the
since-versions of that op's schema whose semantics it implements::

    @register("Sign", since=(9, 13))
    def sign(ctx, a):
        return ctx.tensor(a).sign()

``since`` lists ``onnx.defs.get_schema(op_type, opset).since_version`` values; a node whose
model opset selects another version is refused at load time. A converter that handles versions
with different semantics reads ``ctx.version`` (Softmax before 13 coerces to 2-D, Split before
13 reads ``split`` from an attribute ...); versions that differ only in the element types they
allow share one code path. Versions after 18 are listed only
where the schema change only concerns element types (bfloat16, float8, int4 ... added: the types
lazyvic has run the same code, the others are refused where a value or Cast has them) or is
implemented. The converters live in ``converters/``, one file per family; the
ones derived from the op table are registered by ``converters/optable.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# The default-domain opsets the importer reads, as onnxruntime does: from 7 (the first opset with
# NumPy broadcasting for Add, Mul, ...; each older op version whose semantics differ, such as
# Softmax-1's 2-D coercion or Split-2's split attribute, is implemented by its converter) to
# MAX_OPSET (the newest opset of the onnx release these converters were checked against: above it
# an op may have semantics we have not read).
MIN_OPSET = 7
MAX_OPSET = 28


@dataclass(frozen=True)
class Converter:
    """How one ONNX op type becomes lazyvic calls.

    Attributes:
        op_type: the ONNX op type (default domain).
        convert: ``convert(ctx, *inputs)`` gets each input as a NumPy constant, a Tensor, or None
            (an omitted optional input) and returns one value or a tuple (one per output).
        since: the op's since-versions whose semantics ``convert`` implements.
        fold: ``fold(ctx, *arrays)`` evaluates the node with NumPy when every input is a constant.
        check: ``check(ctx)`` returns a reason when a node uses a feature the converter lacks
            (asked at load time), else None.
        fold_only: the op has no lazyvic primitive (Floor, Sin, ...): it imports only where its
            inputs are constants, which the loader decides at load time.
        constant: the result is a constant whatever the inputs (Shape, Constant, ...: shapes are
            static).
    """

    op_type: str
    convert: Callable
    since: tuple
    fold: Callable | None = None
    check: Callable | None = None
    fold_only: bool = False
    constant: bool = False


CONVERTERS: dict[str, Converter] = {}


def add(converter: Converter) -> Converter:
    """Register ``converter``; an op type has one converter."""
    if converter.op_type in CONVERTERS:
        raise ValueError(f"onnx import: {converter.op_type!r} has two converters")
    CONVERTERS[converter.op_type] = converter
    return converter


def register(
    op_type: str,
    since: tuple,
    *,
    fold: Callable | None = None,
    check: Callable | None = None,
    fold_only: bool = False,
    constant: bool = False,
) -> Callable:
    """Decorator: register the function as the converter of ``op_type`` at the ``since`` versions."""

    def decorate(fn: Callable) -> Callable:
        add(Converter(op_type, fn, tuple(sorted(since)), fold, check, fold_only, constant))
        return fn

    return decorate


def converter(op_type: str) -> Converter | None:
    """The converter of ``op_type``, or None when lazyvic does not import it."""
    return CONVERTERS.get(op_type)


def supported_ops() -> dict[str, tuple[int, ...]]:
    """Op type -> the since-versions of its schema that the importer handles."""
    return {op: c.since for op, c in sorted(CONVERTERS.items())}
