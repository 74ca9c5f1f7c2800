"""The op table: one declaration per primitive, read by every layer.

Each :class:`OpDef` carries the shape/dtype rule, the NumPy reference (the
interpreter and the test oracle), the scalar expression the code generators
inline (elementwise ops), and the vector-Jacobian product written with lazy
tensor ops. Adding a primitive means adding one entry in one of the modules
below plus its tests; tracing, fusion, the interpreter and autograd then pick it
up without other changes.

Kinds:
    source       leaves: realized buffers, Python scalars, random numbers
    elementwise  same-shape inputs, one output element per input element
    reduce       reduces a set of axes; the output keeps them as size 1
    movement     reshape / permute / expand / slice / pad (views: index math)
    matmul       batched matrix product (a BLAS call)
    gather       gather along one dimension (a load at a computed index)
    scatter      scatter_add along one dimension
    conv         2-D convolution (im2col gathers + one BLAS call; ops/conv.py) and its
                 transpose (one BLAS call + col2im; ops/conv_transpose.py)
    pool         2-D max pooling (a window kernel; ops/pool.py) and average pooling, plain and
                 adaptive, with their transposes (window kernels; ops/avg_pool.py)
    join         cat: pieces copied side by side along one axis (ops/join.py)
    collective   an all-reduce or a broadcast between processes inside a captured step's plan
                 (ops/collective.py; its reference sends through lazyvic.distributed)
    recurrent    an LSTM layer's recurrence over a whole sequence and its backward (a loop of one
                 BLAS product and one cell kernel per step; ops/recurrent.py)
    sort         the stable sorting permutation along one axis (ops/sort.py; no kernel yet:
                 it runs as its NumPy reference, a reported step)
    linalg       matrix decompositions and solvers (inv, det, solve, cholesky, eigh, svd, qr;
                 ops/linalg.py): LAPACK through NumPy, a library step of CPU plans

Each entry may also carry its ONNX rule (``onnx``), which the exporter
(lazyvic/interop/onnx/export.py) calls; a primitive that is one ONNX node declares it with
``onnx_node``, which also gives the importer its converter (lazyvic/interop/onnx/converters/
optable.py), so the mapping is written once for both directions. Composites built from
primitives mark their ONNX node in lazyvic/trace/composite.py.

The declarations live in :mod:`lazyvic.ops.opdef` (``OpDef``, the table ``OPS``); this package
imports every family so that the table is complete, and imports nothing above ``errors`` and
``dtypes``: VJPs build nodes only through the tensors they are handed (``g.apply(...)``).
"""

from __future__ import annotations

# Registration happens on import of each family.
from lazyvic.ops import (  # noqa: E402,F401
    avg_pool,
    collective,
    conv,
    conv_transpose,
    elementwise,
    index,
    join,
    linalg,
    matmul,
    movement,
    pool,
    recurrent,
    reduce,
    sort,
    source,
)
from lazyvic.ops.opdef import OPS, OpDef, get, onnx_node, register
