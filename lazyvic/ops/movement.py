"""Movement primitives: views of their input, lowered to index math.

reshape(shape)                  same number of elements, row-major order
permute(perm)                   axes reordered
expand(shape)                   size-1 axes repeated (same rank)
slice(starts, stops, steps)     per-axis ranges, steps > 0, already normalized
pad(pads)                       ((before, after), ...) zeros added per axis

Each declares how an output index maps to the input index it reads (``index_map``, or
``flat_index`` for reshape), when it is the identity, and, for reshape and permute, how two
in a row fold into one; code generation and the graph passes read these declarations.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic.errors import ShapeError
from lazyvic.ops.opdef import OpDef, onnx_node, register


def _numel(shape):
    return math.prod(shape)


def _reshape_infer(shapes, dtypes, at):
    if _numel(shapes[0]) != _numel(at["shape"]):
        raise ShapeError(f"reshape: cannot reshape {shapes[0]} ({_numel(shapes[0])} elements) to {at['shape']}")
    return tuple(at["shape"]), dtypes[0]


def _permute_infer(shapes, dtypes, at):
    perm = at["perm"]
    if sorted(perm) != list(range(len(shapes[0]))):
        raise ShapeError(f"permute: {perm} is not a permutation of the axes of shape {shapes[0]}")
    return tuple(shapes[0][p] for p in perm), dtypes[0]


def _expand_infer(shapes, dtypes, at):
    src, dst = shapes[0], tuple(at["shape"])
    if src == ():  # a scalar broadcast to any shape
        return dst, dtypes[0]
    if len(src) != len(dst) or any(s != d and s != 1 for s, d in zip(src, dst)):
        raise ShapeError(f"expand: cannot expand shape {src} to {dst}")
    return dst, dtypes[0]


def slice_len(start, stop, step):
    return max(0, -(-(stop - start) // step))


def _slice_infer(shapes, dtypes, at):
    shape = shapes[0]
    out = []
    for n, a, b, s in zip(shape, at["starts"], at["stops"], at["steps"]):
        if s <= 0 or not (0 <= a <= n and 0 <= b <= n):
            raise ShapeError(f"slice: range {a}:{b}:{s} invalid for axis of size {n} in shape {shape}")
        out.append(slice_len(a, b, s))
    return tuple(out), dtypes[0]


def _pad_infer(shapes, dtypes, at):
    pads = at["pads"]
    if len(pads) != len(shapes[0]) or any(b < 0 or a < 0 for b, a in pads):
        raise ShapeError(f"pad: pads {pads} invalid for shape {shapes[0]}")
    return tuple(n + b + a for n, (b, a) in zip(shapes[0], pads)), dtypes[0]


def _slice_ref(x, at):
    return x[0][tuple(slice(a, b, s) for a, b, s in zip(at["starts"], at["stops"], at["steps"]))]


def swap_last_two(n: int) -> tuple:
    """The permutation of ``n`` axes that swaps the last two (a matrix transpose)."""
    return tuple(range(n - 2)) + (n - 1, n - 2)


def _permute_vjp(g, x, out, at):
    perm = at["perm"]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (g.apply("permute", g, perm=tuple(inverse)),)


# Float column sums (a bias gradient) are taken as ones(1, M) @ g from this many rows: all of
# them. A threshold of 256 rows made a loop whose batch crossed it record two structures (two
# families of plans: TinyGPT trained on lengths 9..64 at batch 8, 3 misses and 2 plans of
# symbolic sizes instead of 2 and 1); below it the product costs no more than the kernel.
COLUMN_SUM_MIN_ROWS = 2
_ones_rows: dict = {}  # (rows, dtype, device) -> ones(1, rows), the last MAX_ONES_ROWS
MAX_ONES_ROWS = 64


def is_ones_row(node) -> bool:
    """Whether ``node`` holds one of the ones(1, M) rows :func:`_expand_vjp` makes (a captured
    step makes them anew at other sizes: lazyvic/capture.py)."""
    return node.op == "buffer" and any(t._node is node for t in _ones_rows.values())


def _expand_vjp(g, x, out, at):
    if x[0].shape == ():
        return (g._reduce("sum", tuple(range(g.ndim))).reshape() if g.ndim else g,)
    axes = tuple(i for i, (s, d) in enumerate(zip(x[0].shape, at["shape"])) if s != d)
    if not axes:
        return (g,)
    rows = math.prod(g.shape[: len(axes)])
    if axes == tuple(range(len(axes))) and rows >= COLUMN_SUM_MIN_ROWS and g.dtype.is_floating_point:
        # A sum over leading axes (the gradient of a broadcast bias) as one BLAS product: a
        # reduction kernel would walk each column with a stride (measured 0.9 ms against
        # 0.1 ms for the (1024, 512) gradient of TinyGPT's MLP bias).
        key = (rows, g.dtype.name, g.device)
        ones = _ones_rows.get(key)
        if ones is None:
            if len(_ones_rows) >= MAX_ONES_ROWS:  # (a loop over many batch sizes)
                _ones_rows.pop(next(iter(_ones_rows)))
            ones = _ones_rows[key] = g.new_tensor(np.ones((1, rows), dtype=g.dtype.np))
        cols = g.reshape(rows, _numel(g.shape) // rows)
        return ((ones @ cols).reshape(*x[0].shape),)
    return (g._reduce("sum", axes),)


def _slice_vjp(g, x, out, at):
    shape = x[0].shape
    for axis, (a, b, s) in enumerate(zip(at["starts"], at["stops"], at["steps"])):
        if s > 1:
            # Place element k at position k*s: add a trailing axis of size s
            # (zeros after the element), merge it in, then trim to b - a.
            m = g.shape[axis]
            g = g.unsqueeze(axis + 1)._pad(tuple((0, s - 1) if i == axis + 1 else (0, 0) for i in range(g.ndim + 1)))
            g = g.reshape(g.shape[:axis] + (m * s,) + g.shape[axis + 2 :])
            starts = tuple(0 for _ in g.shape)
            stops = tuple(b - a if i == axis else d for i, d in enumerate(g.shape))
            g = g._slice(starts, stops, tuple(1 for _ in g.shape))
    pads = tuple((a, n - a - g.shape[i]) for i, (n, a) in enumerate(zip(shape, at["starts"])))
    return (g._pad(pads),)


def _pad_vjp(g, x, out, at):
    starts = tuple(b for b, _ in at["pads"])
    stops = tuple(b + n for (b, _), n in zip(at["pads"], x[0].shape))
    return (g._slice(starts, stops, tuple(1 for _ in starts)),)


# Index maps: output index (one affine form per axis) -> the input index it reads.
def _permute_index(index, at, in_shape, shape):
    in_index = [None] * len(in_shape)
    for k, p in enumerate(at["perm"]):
        in_index[p] = index[k]
    return in_index


def _expand_index(index, at, in_shape, shape):
    # A repeated axis reads element 0 of the input's size-1 axis (a scalar input: no axes).
    return [i.scale(0) if (n == 1 and s != 1) else i for i, n, s in zip(index, in_shape, shape)]


def _slice_index(index, at, in_shape, shape):
    return [i.scale(step) + start for i, start, step in zip(index, at["starts"], at["steps"])]


def _pad_index(index, at, in_shape, shape):
    return [i + (-before) for i, (before, _) in zip(index, at["pads"])]


def _same_shape(at, in_shape, shape):
    return in_shape == shape


def _permute_is_identity(at, in_shape, shape):
    return tuple(at["perm"]) == tuple(range(len(shape)))


def _slice_is_identity(at, in_shape, shape):
    return in_shape == shape and set(at["steps"]) <= {1}


def _pad_is_identity(at, in_shape, shape):
    return all(b == 0 and a == 0 for b, a in at["pads"])


def _permute_fold(inner, outer):
    return {"perm": tuple(inner["perm"][p] for p in outer["perm"])}


# ONNX export rules (opset 13: shapes, slice bounds and pads are int64 inputs).
def _reshape_onnx(b, names, at, shape, dtype):
    return b.node("Reshape", [names[0], b.ints(shape, "shape", infer_one=True)])


def _expand_onnx(b, names, at, shape, dtype):
    return b.node("Expand", [names[0], b.ints(shape, "shape")])


def _slice_onnx(b, names, at, shape, dtype):
    src = b.shape_of(names[0])
    axes = [
        i for i, (a, e, s, n) in enumerate(zip(at["starts"], at["stops"], at["steps"], src)) if (a, e, s) != (0, n, 1)
    ]
    if not axes:
        return b.node("Identity", names)
    pick = lambda key: b.ints([at[key][i] for i in axes], key)  # noqa: E731
    return b.node("Slice", [names[0], pick("starts"), pick("stops"), b.ints(axes, "axes"), pick("steps")])


def _pad_onnx(b, names, at, shape, dtype):
    pads = [p for p, _ in at["pads"]] + [p for _, p in at["pads"]]
    return b.node("Pad", [names[0], b.ints(pads, "pads")], mode="constant")


def _permute_from_onnx(onnx_attrs, shapes):
    """Transpose's ``perm`` as permute's (ONNX's default reverses the axes; negative entries count
    from the end). A ``perm`` that is no permutation fails in ``_permute_infer``."""
    ndim = len(shapes[0])
    perm = onnx_attrs.get("perm")
    if perm is None:
        return {"perm": tuple(reversed(range(ndim)))}
    return {"perm": tuple(int(p) + ndim if int(p) < 0 else int(p) for p in perm)}


register(
    OpDef(
        "reshape",
        "movement",
        1,
        _reshape_infer,
        lambda x, at: x[0].reshape(at["shape"]),
        vjp=lambda g, x, out, at: (g.reshape(x[0].shape),),
        onnx=_reshape_onnx,
        flat_index=True,
        is_identity=_same_shape,
        fold=lambda inner, outer: outer,
    )
)
register(
    OpDef(
        "permute",
        "movement",
        1,
        _permute_infer,
        lambda x, at: x[0].transpose(at["perm"]),
        vjp=_permute_vjp,
        onnx=onnx_node("Transpose", since=(1, 13, 21, 23, 24, 25), carried=("perm",), from_onnx=_permute_from_onnx),
        index_map=_permute_index,
        is_identity=_permute_is_identity,
        fold=_permute_fold,
    )
)
register(
    OpDef(
        "expand",
        "movement",
        1,
        _expand_infer,
        lambda x, at: np.broadcast_to(x[0], at["shape"]),
        vjp=_expand_vjp,
        onnx=_expand_onnx,
        index_map=_expand_index,
        is_identity=_same_shape,
    )
)
register(
    OpDef(
        "slice",
        "movement",
        1,
        _slice_infer,
        _slice_ref,
        vjp=_slice_vjp,
        onnx=_slice_onnx,
        index_map=_slice_index,
        is_identity=_slice_is_identity,
    )
)
register(
    OpDef(
        "pad",
        "movement",
        1,
        _pad_infer,
        lambda x, at: np.pad(x[0], at["pads"]),
        vjp=_pad_vjp,
        onnx=_pad_onnx,
        index_map=_pad_index,
        reads_outside=True,
        is_identity=_pad_is_identity,
    )
)
