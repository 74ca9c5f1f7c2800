"""Joining tensors along an axis, as one primitive.

    cat(x1, ..., xk; axis)
        xi (..., ni, ...) of one dtype and equal sizes outside ``axis`` -> (..., n1 + ... + nk, ...),
        piece i at positions [n1 + ... + n(i-1), n1 + ... + ni) of ``axis``

``lazyvic.cat`` records it for MIN_PIECES (four) or more pieces; fewer
pieces are zero-padded and summed, which fuses with their producers and consumers. A primitive
because, as a sum of k padded pieces, every output element of the fused kernel evaluated the
padding tests of all k pieces: stacking an LSTM language model's 35 step outputs, (35, 20, 128),
took about 1.5 ms (k tests and loads per element) where copying the pieces takes microseconds.
The copy rounds nothing: the interpreter (``np.concatenate``) and the compiled step give the same
bits, signed zeros included (the padded sum turned -0.0 into 0.0).

The VJP slices the gradient back into the pieces. ONNX: one ``Concat`` node.
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops.opdef import OpDef, register

# Joins of this many pieces or more are the cat primitive (the front end's cat, conv2d's
# depthwise weight gradient, and the gradients autograd/engine joins); fewer are zero-padded
# and summed, which fuses with the pieces' producers and consumers.
MIN_PIECES = 4


def _infer(shapes, dtypes, at):
    axis = at["axis"]
    first = shapes[0]
    if not 0 <= axis < len(first):
        raise ShapeError(f"cat: axis {axis} out of range for pieces of rank {len(first)}")
    total = first[axis]
    for shape, dtype in zip(shapes[1:], dtypes[1:]):
        if len(shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(shape, first)) if i != axis):
            raise ShapeError(f"cat: shapes {list(shapes)} differ outside axis {axis}")
        if dtype is not dtypes[0]:
            raise DTypeError(f"cat: pieces of dtypes {[d.name for d in dtypes]}; expected one dtype")
        total = total + shape[axis]
    return tuple(total if i == axis else n for i, n in enumerate(first)), dtypes[0]


def _reference(arrays, at):
    return np.concatenate(arrays, axis=at["axis"])


def _vjp(g, xs, out, at):
    axis = at["axis"]
    grads, start = [], 0
    for x in xs:
        stop = start + x.shape[axis]
        starts = tuple(start if i == axis else 0 for i in range(g.ndim))
        stops = tuple(stop if i == axis else n for i, n in enumerate(g.shape))
        grads.append(g._slice(starts, stops, (1,) * g.ndim))
        start = stop
    return tuple(grads)


def _onnx(b, names, at, shape, dtype):
    return b.node("Concat", list(names), axis=at["axis"])


# arity -1: any number of inputs (one or more).
register(OpDef("cat", "join", -1, _infer, _reference, vjp=_vjp, onnx=_onnx))
