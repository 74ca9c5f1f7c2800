"""The LSTM, GRU and Elman RNN recurrences over a whole sequence as primitives, and their VJPs.

    lstm_scan(xp, h0, c0, w_hh; reverse)
        xp (T, N, 4H): the input projection of every step, ``x_t W_ih^T + b_ih + b_hh``;
        h0, c0 (N, H): the initial states; w_hh (4H, H), gates i, f, g, o (PyTorch's order).
        -> y (T, N, 6H): per step and row ``[h_t, c_t, i, f, g, o]``, the states and the
        activated gates (the gates are what the backward reads), in time order whatever the
        direction

    with, at step t (t = 0 .. T-1, or T-1 .. 0 when ``reverse``; h_{t-1} is the state of the
    step before in that order) (``torch.nn.LSTM``'s equations; Hochreiter & Schmidhuber 1997)::

        gates = xp[t] + h_{t-1} @ w_hh^T
        i, f, o = sigmoid(gates_i, gates_f, gates_o); g = tanh(gates_g)
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    lstm_scan_backward(gy, y, c0, w_hh; reverse)
        gy (T, N, 6H): the cotangent of y; y its forward output -> d (T, N, 6H): per step
        ``[dgates (4H), dc_{t-1} (H), dh_{t-1} (H)]``, the gradient of the gates'
        pre-activations (that of xp[t]) and of the states the step read

    gru_scan(xp, h0, w_hh, b_hh; reverse) and gru_scan_backward(gy, y, h0, w_hh; reverse): the
    same for a GRU; rnn_scan(xp, h0, w_hh; nonlinearity, reverse) and
    rnn_scan_backward(gy, y, w_hh; nonlinearity, reverse) for an Elman RNN (tanh or relu)
    (shapes and equations with their code below).

Every scan and backward takes an optional last input, ``lengths`` (N,) int64: row n runs steps
t < lengths[n] only (sequences of different lengths, as a PackedSequence's; backwards in time a
row starts at its own last step). At a step past its length a row holds its state (y's state
columns copy those of the step before, or the initial state; its other columns are 0) and its
gradients pass through to the step before (d's pre-activation columns are 0). Without it every
row runs all T steps.

Float inputs of one dtype, float32 or float64 (else DTypeError); lengths (N,) int64 (else
ShapeError; a length of 0 holds the row's initial state throughout, one above T runs all steps);
shapes as above (else ShapeError, naming the op and the shapes); a nonlinearity other than
"tanh" or "relu": ArgumentError.

Why a primitive: unrolled into the lazy graph, a 35-step two-layer LSTM's training step
recorded, planned and ran about 3,000 nodes (48 ms a step against PyTorch's 2.6). As one op,
each layer is one library step: a loop over the steps in which each step is one BLAS product
(``h @ w_hh^T`` into a reused buffer) and one compiled cell kernel
(``lowering/cpu/recurrent_kernels.py``); the backward is the same loop in reverse, and the
weight gradient one product over all steps (``dgates^T @ h_prev``), written in the VJP with
lazy ops.

The per-step products run on one BLAS thread (``ops/blas.py``): woken for a product this
small, OpenBLAS's second thread cost up to half a millisecond on this machine (70 ms of such
waits in a step of the 2 x 128 language model), and the loop gives the same bits wherever it
runs. Same bits on every tier: :func:`scan_forward`, :func:`lstm_backward` and
:func:`gru_backward` are the loops of both
the NumPy reference (``cell`` the NumPy functions below) and the CPU step (``cell`` the Numba
kernels): the same products on the same operands, and cells that do the same float operations
in the same order (each rounded: no fused multiply-add), with the activations of
``ops/numerics.py`` (float32) or the C library (float64), as the elementwise ops.
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.ops import elementwise  # noqa: F401 - registers sigmoid and tanh, read below
from lazyvic.ops.blas import matmul_into, one_thread
from lazyvic.ops.opdef import OPS, OpDef, register


# The elementwise ops' references: float32 through ops/numerics.py, float64 through the C library.
def _sigmoid(x):
    return OPS["sigmoid"].reference((x,), {})


def _tanh(x):
    return OPS["tanh"].reference((x,), {})


def _infer(shapes, dtypes, at):
    shapes, dtypes = _lengths_shape("lstm_scan", shapes, dtypes, 4, 0)
    xs, hs, cs, ws = shapes
    if len(xs) != 3 or len(ws) != 2 or xs[2] != ws[0] or ws[0] != 4 * ws[1] or tuple(hs) != (xs[1], ws[1]):
        raise ShapeError(
            f"lstm_scan: expected xp (T, N, 4H), h0 and c0 (N, H) and w_hh (4H, H), got {xs}, {hs}, {cs} and {ws}"
        )
    if tuple(cs) != tuple(hs):
        raise ShapeError(f"lstm_scan: expected c0 {hs} like h0, got {cs}")
    _one_float_dtype("lstm_scan", dtypes)
    _some_steps("lstm_scan", xs)
    return (xs[0], xs[1], 6 * ws[1]), dtypes[0]


def _some_steps(name: str, xs) -> None:
    if xs[0] < 1:
        raise ShapeError(f"{name}: expected at least one time step, got xp of shape {xs}")


def _lengths_shape(name: str, shapes, dtypes, arity: int, seq: int) -> tuple:
    """(shapes, dtypes) of the float inputs; checks the optional ``lengths`` input (N,) int64
    (N: the second size of input ``seq``, xp or y)."""
    if len(shapes) == arity + 1:
        rows = shapes[seq][1] if len(shapes[seq]) == 3 else None
        if tuple(shapes[arity]) != (rows,) or dtypes[arity].name != "int64":
            raise ShapeError(
                f"{name}: expected lengths ({rows},) int64 (one per row), got {tuple(shapes[arity])} {dtypes[arity].name}"
            )
        return shapes[:arity], dtypes[:arity]
    if len(shapes) != arity:
        raise ShapeError(f"{name}: expected {arity} inputs and optional lengths, got {len(shapes)} inputs")
    return shapes, dtypes


def _one_float_dtype(name: str, dtypes) -> None:
    dtype = dtypes[0]
    if dtype.name not in ("float32", "float64") or any(d is not dtype for d in dtypes):
        raise DTypeError(f"{name}: expected float32 or float64 inputs of one dtype, got {[d.name for d in dtypes]}")


def _backward_infer_of(name: str, width: int, gates: int, state: str):
    """The shape rule of a scan's backward (gy, y, state (N, H), w_hh (gates*H, H)): d like y."""

    def infer(shapes, dtypes, at):
        shapes, dtypes = _lengths_shape(name, shapes, dtypes, 4, 1)
        gs, ys, ss, ws = shapes
        bad = tuple(gs) != tuple(ys) or len(ys) != 3 or len(ws) != 2
        if bad or ys[2] != width * ws[1] or ws[0] != gates * ws[1] or tuple(ss) != (ys[1], ws[1]):
            raise ShapeError(
                f"{name}: expected gy and y (T, N, {width}H), {state} (N, H) and w_hh ({gates}H, H), "
                f"got {gs}, {ys}, {ss} and {ws}"
            )
        _one_float_dtype(name, dtypes)
        return tuple(ys), dtypes[1]

    return infer


# ------------------------------------------------------------------ the loops (every tier)
# From this many rows (the batch) on, the per-step products read a row-major copy of w_hh^T made
# once per call: OpenBLAS (one thread) multiplied h (N, 128) by the transposed view of a
# (512, 128) w_hh in 28 us at N = 4 against 5 us from the copy, the same at N = 1 and 2
# (functional/recurrent.py has the table, and its unrolled layers use this threshold); the copy
# costs about 30 us a call, a fifth of a 35-step layer at batch 1.
COPY_MIN_ROWS = 3


def recurrent_weight(w_hh: np.ndarray, rows: int, groups: int = 1) -> np.ndarray:
    """w_hh^T as the per-step products read it: a row-major copy from COPY_MIN_ROWS rows on,
    else the transposed view; in ``groups`` of hidden units (:func:`unit_groups`), its columns
    in the order :func:`group_columns` gives."""
    if groups > 1:  # one row-major copy, its blocks of columns in groups' order (no temporary)
        hidden = w_hh.shape[1]
        gates, units = w_hh.shape[0] // hidden, hidden // groups
        out = np.empty((hidden, w_hh.shape[0]), dtype=w_hh.dtype)
        for g in range(groups):
            for k in range(gates):
                col = (g * gates + k) * units
                out[:, col : col + units] = w_hh[k * hidden + g * units : k * hidden + (g + 1) * units].T
        return out
    return np.ascontiguousarray(w_hh.T) if rows >= COPY_MIN_ROWS else w_hh.T


# A forward's step in groups of hidden units. Unit j's gates need only the columns k*H + j of the
# step's product (k = 0 .. G-1), so the product and the cell of a group of units depend on no
# other group's: the CPU step runs the groups of a step side by side on its thread team, one
# parallel region a step (lowering/cpu/recurrent_kernels.py). Each group's product reads its own
# contiguous block of w_hh^T's columns, [gate 0's units, gate 1's, ...] (group_columns). Fixed
# by the shape alone, never by the threads or the load, and every tier groups alike (the groups'
# column blocks may round other last bits than the whole product's). A group keeps at least
# GROUP_MIN_UNITS units and GROUP_MIN_WORK multiply-adds a step: LSTM 2 x 128 inference, batch
# 20 (per step a (20 x 128) @ (128 x 512) product, 38 us on one thread, and a 15 us cell), ran
# 48 us a step on one thread and 25 in two groups on two.
GROUP_MIN_UNITS = 64
GROUP_MIN_WORK = 1 << 18
MAX_GROUPS = 8


def unit_groups(rows: int, hidden: int, gates: int) -> int:
    """How many groups of hidden units (a power of two, at most MAX_GROUPS) a forward's steps run
    in, for ``rows`` rows (the batch), ``hidden`` units and ``gates`` gates (LSTM 4, GRU 3, RNN
    1): each group at least GROUP_MIN_UNITS units (a multiple of 16) and GROUP_MIN_WORK
    multiply-adds; 1 below COPY_MIN_ROWS rows (the products read w_hh^T's transposed view)."""
    groups = 1
    while 2 * groups <= MAX_GROUPS and rows >= COPY_MIN_ROWS and hidden % (32 * groups) == 0:
        units = hidden // (2 * groups)
        if units < GROUP_MIN_UNITS or rows * gates * hidden * units < GROUP_MIN_WORK:
            break
        groups *= 2
    return groups


def group_columns(hidden: int, gates: int, groups: int) -> np.ndarray:
    """The columns of w_hh^T (rows of w_hh) in the order the grouped products read them: per
    group g of ``hidden // groups`` units, gate 0's units, then gate 1's, ..."""
    units = hidden // groups
    order = np.arange(gates * hidden).reshape(gates, groups, units)
    return np.ascontiguousarray(order.transpose(1, 0, 2)).reshape(-1)


# OpenBLAS (the build NumPy ships; SkylakeX kernels here) multiplies through its small-matrix
# kernels, without packing, when M * N * K is below 2**20, and packs both operands above it: one
# thread, float32, (20 x 128) @ (128 x 512) took 34-38 us, the same as two (128 x 256) column
# blocks 25 us; (20 x 256) @ (256 x 1024) 217 us, as 6 blocks 136; (8 x 512) @ (512 x 2048) 558
# us, as 9 blocks 237. Blocks narrower than 64 columns lost as often as they won (16 wide: up to
# 3x slower), so the per-step products are split into equal column blocks of at least 64 (a
# multiple of 16) that fit below the threshold, or not at all. Every tier splits alike (the
# blocks change the bits of some shapes).
SMALL_PRODUCT = 1 << 20
MIN_BLOCK = 64


def column_block(rows: int, cols: int, inner: int) -> int:
    """The width of the equal column blocks a per-step product (rows x inner) @ (inner x cols)
    is made in (see SMALL_PRODUCT): ``cols`` when one product is best (or rows < 2: a gemv)."""
    if rows < 2 or rows * cols * inner < SMALL_PRODUCT:
        return cols
    limit = (SMALL_PRODUCT - 1) // (rows * inner)
    for k in range(2, cols // MIN_BLOCK + 1):
        width = cols // k
        if cols % k == 0 and width % 16 == 0 and width <= limit:
            return width
    return cols


def blocked_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, width: int) -> None:
    """out = a @ b as products of ``width``-column blocks of b and out (:func:`column_block`)."""
    for s in range(0, out.shape[1], width):
        matmul_into(a, b[:, s : s + width], out[:, s : s + width])


def step_order(steps: int, reverse: bool) -> list:
    """(t, the step whose states t reads or -1 for the initial ones) in the order of the recurrence."""
    if reverse:
        return [(t, t + 1 if t + 1 < steps else -1) for t in range(steps - 1, -1, -1)]
    return [(t, t - 1) for t in range(steps)]


def split_lengths(arrays: list) -> tuple:
    """(the float operands, the optional lengths or None) of a scan's or backward's input arrays:
    the lengths are the int64 last one."""
    if arrays[-1].dtype == np.int64:
        return arrays[:-1], arrays[-1]
    return arrays, None


def full_lengths(lengths, steps: int, rows: int) -> np.ndarray:
    """The per-row step counts a loop reads: ``lengths`` as a C-contiguous int64 array or, absent,
    every row the whole sequence."""
    if lengths is None:
        return np.full(rows, steps, dtype=np.int64)
    return np.ascontiguousarray(lengths, dtype=np.int64)


def hold_forward(y, t: int, prev: int, lengths, init) -> None:
    """Rows past their length at step t (``t >= lengths``) hold their state: y[t]'s first S columns
    (S: init's width; LSTM h and c, else h) copy the step before's (init's, the initial state, when
    ``prev`` is -1), its other columns are 0. Exact copies: every tier alike."""
    idle = t >= lengths
    if idle.any():
        width = init.shape[1]
        y[t, idle, :width] = (init if prev < 0 else y[prev, :, :width])[idle]
        y[t, idle, width:] = 0


def hold_backward(gy, d, t: int, after: int, lengths, moves: tuple, zeros: int) -> None:
    """Rows past their length at step t pass their states' gradients through: for each (gy column,
    d column, width) of ``moves``, d[t] there = gy[t] there + d[after] there (the gradient the step
    after passed back; none when ``after`` is -1), and d[t]'s first ``zeros`` columns (the
    pre-activations') are 0."""
    idle = t >= lengths
    if idle.any():
        for g0, d0, width in moves:
            v = gy[t, idle, g0 : g0 + width]
            if after >= 0:
                v = v + d[after, idle, d0 : d0 + width]
            d[t, idle, d0 : d0 + width] = v
        d[t, idle, :zeros] = 0


def lstm_init(h0, c0) -> np.ndarray:
    """The state an LSTM row holds before its first step: (N, 2H), h then c (y's first columns)."""
    return np.concatenate([h0, c0], axis=1)


def lstm_moves(hidden: int) -> tuple:
    """hold_backward's moves of an LSTM: dh (gy's h column) to d's dh_prev, dc to dc_prev."""
    return ((0, 5 * hidden, hidden), (hidden, 4 * hidden, hidden))


def scan_forward(xp, h0, w_hh, y, cell, reverse: bool, *operands, lengths=None, init=None) -> None:
    """Fill y (T, N, K*H) (C-contiguous; h_t in its first H columns) from C-contiguous xp, h0,
    w_hh (G*H, H) and ``operands``, backwards in time when ``reverse``: per step
    ``hw = h_prev @ w_hh^T`` (h_prev: h0, or h of step ``prev``; in :func:`unit_groups`'
    groups of columns, each in :func:`column_block`'s blocks), then ``cell(xp, hw,
    *operands, y, t, prev, one)`` computes step t's row of y (LSTM: operands c0; GRU: h0, b_hh),
    then rows past their ``lengths`` hold their state (:func:`hold_forward`; ``init``: the state
    before the first step, h0 by default)."""
    rows, hidden = h0.shape
    gates = w_hh.shape[0] // hidden
    groups = unit_groups(rows, hidden, gates)
    wt = recurrent_weight(w_hh, rows, groups)
    hw = np.empty((rows, w_hh.shape[0]), dtype=y.dtype)
    grouped = np.empty_like(hw) if groups > 1 else hw  # the product's columns in groups' order
    back = np.argsort(group_columns(hidden, gates, groups)) if groups > 1 else None
    one = y.dtype.type(1)
    lengths = full_lengths(lengths, y.shape[0], y.shape[1])
    init = h0 if init is None else init
    width = column_block(rows, w_hh.shape[0] // groups, hidden)
    with one_thread():
        for t, prev in step_order(y.shape[0], reverse):
            blocked_matmul(h0 if prev < 0 else y[prev, :, :hidden], wt, grouped, width)
            if groups > 1:
                np.take(grouped, back, axis=1, out=hw)
            cell(xp, hw, *operands, y, t, prev, one)
            hold_forward(y, t, prev, lengths, init)


def lstm_forward(xp, h0, c0, w_hh, y, cell, reverse: bool = False, lengths=None) -> None:
    """lstm_scan: :func:`scan_forward` with ``cell(xp, hw, c0, y, t, prev, one)``."""
    scan_forward(xp, h0, w_hh, y, cell, reverse, c0, lengths=lengths, init=lstm_init(h0, c0))


def lstm_backward(gy, y, c0, w_hh, d, cell, reverse: bool = False, lengths=None) -> None:
    """Fill d (T, N, 6H) (C-contiguous) from C-contiguous gy, y, c0 and w_hh: the recurrence's
    steps in the opposite order; ``cell(gy, y, c0, d, t, prev, after, one, dh, dc)`` computes
    step t's dgates and dc_prev from the row of d of step ``after`` (the step that read t's
    states; -1: none), with dh and dc (N, H) as scratch, then the product gives dh_prev."""
    hidden = c0.shape[1]
    one = y.dtype.type(1)
    dh, dc, mm = np.empty_like(c0), np.empty_like(c0), np.empty_like(c0)
    lengths, moves = full_lengths(lengths, y.shape[0], y.shape[1]), lstm_moves(hidden)
    after = -1
    width = column_block(mm.shape[0], hidden, 4 * hidden)
    with one_thread():
        for t, prev in reversed(step_order(y.shape[0], reverse)):
            cell(gy, y, c0, d, t, prev, after, one, dh, dc)
            # into a buffer of its own (NumPy hands BLAS the operands as they are: no overlap
            # copy), then copied: the native loop makes the same calls (recurrent_kernels.py)
            blocked_matmul(d[t, :, : 4 * hidden], w_hh, mm, width)
            d[t, :, 5 * hidden :] = mm
            hold_backward(gy, d, t, after, lengths, moves, 4 * hidden)
            after = t


# ------------------------------------------------------------------ the NumPy cells
def numpy_forward_cell(xp, hw, c0, y, t, prev, one) -> None:
    """Step t of :func:`lstm_forward` in NumPy (the interpreter's; the kernel does the same
    operations in the same order)."""
    hidden = c0.shape[1]
    gates = xp[t] + hw
    i = _sigmoid(gates[:, :hidden])
    f = _sigmoid(gates[:, hidden : 2 * hidden])
    g = _tanh(gates[:, 2 * hidden : 3 * hidden])
    o = _sigmoid(gates[:, 3 * hidden :])
    c_prev = c0 if prev < 0 else y[prev, :, hidden : 2 * hidden]
    c = f * c_prev + i * g
    h = o * _tanh(c)
    for k, v in enumerate((h, c, i, f, g, o)):
        y[t, :, k * hidden : (k + 1) * hidden] = v


def numpy_backward_cell(gy, y, c0, d, t, prev, after, one, dh_scratch=None, dc_scratch=None) -> None:
    """Step t of :func:`lstm_backward` in NumPy (the kernel does the same operations in the
    same order; it needs the scratch, this does not)."""
    hidden = c0.shape[1]
    cut = lambda a, k: a[t, :, k * hidden : (k + 1) * hidden]  # noqa: E731
    c, i, f, g, o = (cut(y, k) for k in range(1, 6))
    dh, dc = cut(gy, 0), cut(gy, 1)
    if after >= 0:
        dh = dh + d[after, :, 5 * hidden :]
        dc = dc + d[after, :, 4 * hidden : 5 * hidden]
    c_prev = c0 if prev < 0 else y[prev, :, hidden : 2 * hidden]
    tc = _tanh(c)
    do = dh * tc + cut(gy, 5)
    dc = dc + dh * o * (one - tc * tc)
    di = dc * g + cut(gy, 2)
    df = dc * c_prev + cut(gy, 3)
    dg = dc * i + cut(gy, 4)
    d[t, :, :hidden] = di * i * (one - i)
    d[t, :, hidden : 2 * hidden] = df * f * (one - f)
    d[t, :, 2 * hidden : 3 * hidden] = dg * (one - g * g)
    d[t, :, 3 * hidden : 4 * hidden] = do * o * (one - o)
    d[t, :, 4 * hidden : 5 * hidden] = dc * f


def _reference_of(loop, cell, width: int = 0):
    """The NumPy reference of a scan op: ``loop`` with the NumPy ``cell`` over C-contiguous copies
    of the inputs (and the optional lengths, an int64 last input, as ``lengths``), into a new
    output of shape (T, N, width * H) (H: the last size of the second
    input, h0 (N, H) of a forward or y (T, N, H) of rnn_scan_backward) or, with ``width`` 0, of
    the shape of y, the second input (a backward). ``cell`` may be a
    dict of cells by the op's ``nonlinearity`` (rnn_scan)."""

    def reference(arrays, at):
        arrays, lengths = split_lengths([np.ascontiguousarray(a) for a in arrays])
        first, second = arrays[0], arrays[1]
        shape = (first.shape[0], first.shape[1], width * second.shape[-1]) if width else second.shape
        out = np.empty(shape, dtype=first.dtype)
        loop(*arrays, out, cell[at["nonlinearity"]] if isinstance(cell, dict) else cell, at["reverse"], lengths)
        return out

    return reference


def _h_prev(gy, y, h0, steps: int, hidden: int, reverse: bool):
    """(T, N, H): the state each step read, h0 for the first step of the recurrence, then h of the step before."""
    h_prev = h0.unsqueeze(0)
    if steps > 1:
        pieces = (y[1:, :, :hidden], h_prev) if reverse else (h_prev, y[: steps - 1, :, :hidden])
        h_prev = gy.apply("cat", *pieces, axis=0)
    return h_prev


def _vjp(gy, inputs, y, at):
    xp, h0, c0, w_hh, *lengths = inputs
    steps, batch, hidden = y.shape[0], y.shape[1], h0.shape[1]
    reverse = at["reverse"]
    d = gy.apply("lstm_scan_backward", gy, y, c0, w_hh, *lengths, reverse=reverse)
    dgates = d[:, :, : 4 * hidden]
    dw = dgates.reshape(steps * batch, 4 * hidden).T @ _h_prev(gy, y, h0, steps, hidden, reverse).reshape(
        steps * batch, hidden
    )
    first = steps - 1 if reverse else 0
    return dgates, d[first, :, 5 * hidden :], d[first, :, 4 * hidden : 5 * hidden], dw, *[None for _ in lengths]


def _register(
    name: str,
    infer,
    vjp,
    forward,
    forward_cell,
    backward,
    backward_cell,
    width: int,
    gates: int,
    state: str,
    arity: int = 4,
    backward_infer=None,
    backward_width: int = 0,
):
    """Register scan op ``name`` (y of ``width`` * H columns, w_hh of ``gates`` * H rows) and its backward."""
    register(OpDef(name, "recurrent", arity, infer, _reference_of(forward, forward_cell, width), vjp=vjp))
    backward_name = name + "_backward"
    backward_infer = backward_infer or _backward_infer_of(backward_name, width, gates, state)
    reference = _reference_of(backward, backward_cell, backward_width)
    register(OpDef(backward_name, "recurrent", arity, backward_infer, reference, differentiable=False))


_register("lstm_scan", _infer, _vjp, lstm_forward, numpy_forward_cell, lstm_backward, numpy_backward_cell, 6, 4, "c0")


# ================================================================== GRU
# gru_scan(xp, h0, w_hh, b_hh; reverse)
#     xp (T, N, 3H): ``x_t W_ih^T + b_ih``; h0 (N, H); w_hh (3H, H) and b_hh (3H,), gates r, z, n
#     (PyTorch's order) -> y (T, N, 5H): per step and row ``[h_t, r, z, n, hn]``, with
#     (``torch.nn.GRU``'s equations; Cho et al. 2014)::
#
#         hp = h_{t-1} @ w_hh^T + b_hh;  hn = hp_n
#         r = sigmoid(xp_r + hp_r); z = sigmoid(xp_z + hp_z); n = tanh(xp_n + r * hn)
#         h_t = n + z * (h_{t-1} - n)                      (= (1 - z) * n + z * h_{t-1})
#
# gru_scan_backward(gy, y, h0, w_hh; reverse) -> d (T, N, 5H): per step
#     ``[dr, dz, dn (the pre-activations': that of xp[t]), dhn, dh_{t-1}]``; the gradient of hp
#     (of w_hh's product and of b_hh) is [dr, dz, dhn].


def _gru_infer(shapes, dtypes, at):
    shapes, dtypes = _lengths_shape("gru_scan", shapes, dtypes, 4, 0)
    xs, hs, ws, bs = shapes
    if len(xs) != 3 or len(ws) != 2 or xs[2] != ws[0] or ws[0] != 3 * ws[1] or tuple(hs) != (xs[1], ws[1]):
        raise ShapeError(f"gru_scan: expected xp (T, N, 3H), h0 (N, H) and w_hh (3H, H), got {xs}, {hs} and {ws}")
    if tuple(bs) != (ws[0],):
        raise ShapeError(f"gru_scan: expected b_hh ({ws[0]},), got {bs}")
    _one_float_dtype("gru_scan", dtypes)
    _some_steps("gru_scan", xs)
    return (xs[0], xs[1], 5 * ws[1]), dtypes[0]


def gru_forward(xp, h0, w_hh, b_hh, y, cell, reverse: bool = False, lengths=None) -> None:
    """gru_scan: :func:`scan_forward` with ``cell(xp, hw, h0, b_hh, y, t, prev, one)``."""
    scan_forward(xp, h0, w_hh, y, cell, reverse, h0, b_hh, lengths=lengths)


def gru_backward(gy, y, h0, w_hh, d, cell, reverse: bool = False, lengths=None) -> None:
    """Fill d (T, N, 5H) from C-contiguous gy, y, h0 and w_hh, the recurrence's steps in the
    opposite order: ``cell(gy, y, h0, d, dhp, t, prev, after, one)`` computes step t's row of d
    (dh_{t-1} without the product) and the gradient of hp into dhp (N, 3H); then
    ``dh_{t-1} += dhp @ w_hh``."""
    hidden = h0.shape[1]
    one = y.dtype.type(1)
    dhp = np.empty((h0.shape[0], 3 * hidden), dtype=y.dtype)
    mm = np.empty_like(h0)
    lengths, moves = full_lengths(lengths, y.shape[0], y.shape[1]), ((0, 4 * hidden, hidden),)
    after = -1
    width = column_block(mm.shape[0], hidden, 3 * hidden)
    with one_thread():
        for t, prev in reversed(step_order(y.shape[0], reverse)):
            cell(gy, y, h0, d, dhp, t, prev, after, one)
            blocked_matmul(dhp, w_hh, mm, width)
            np.add(d[t, :, 4 * hidden :], mm, out=d[t, :, 4 * hidden :])
            hold_backward(gy, d, t, after, lengths, moves, 4 * hidden)
            after = t


def numpy_gru_forward_cell(xp, hw, h0, b_hh, y, t, prev, one) -> None:
    """Step t of :func:`gru_forward` in NumPy (the kernel does the same operations in the same order)."""
    hidden = h0.shape[1]
    hp = hw + b_hh
    x = xp[t]
    r = _sigmoid(x[:, :hidden] + hp[:, :hidden])
    z = _sigmoid(x[:, hidden : 2 * hidden] + hp[:, hidden : 2 * hidden])
    hn = hp[:, 2 * hidden :]
    n = _tanh(x[:, 2 * hidden :] + r * hn)
    h_prev = h0 if prev < 0 else y[prev, :, :hidden]
    h = n + z * (h_prev - n)
    for k, v in enumerate((h, r, z, n, hn)):
        y[t, :, k * hidden : (k + 1) * hidden] = v


def numpy_gru_backward_cell(gy, y, h0, d, dhp, t, prev, after, one) -> None:
    """Step t of :func:`gru_backward` in NumPy (the kernel does the same operations in the same order)."""
    hidden = h0.shape[1]
    cut = lambda a, k: a[t, :, k * hidden : (k + 1) * hidden]  # noqa: E731
    r, z, n, hn = (cut(y, k) for k in range(1, 5))
    dh = cut(gy, 0)
    if after >= 0:
        dh = dh + d[after, :, 4 * hidden :]
    h_prev = h0 if prev < 0 else y[prev, :, :hidden]
    dz = dh * (h_prev - n) + cut(gy, 2)
    dn = dh * (one - z) + cut(gy, 3)
    dn = dn * (one - n * n)
    dhn = dn * r + cut(gy, 4)
    dr = dn * hn + cut(gy, 1)
    dr = dr * r * (one - r)
    dz = dz * z * (one - z)
    for k, v in enumerate((dr, dz, dn, dhn, dh * z)):
        d[t, :, k * hidden : (k + 1) * hidden] = v
    dhp[:, : 2 * hidden] = d[t, :, : 2 * hidden]
    dhp[:, 2 * hidden :] = dhn


def _gru_vjp(gy, inputs, y, at):
    xp, h0, w_hh, b_hh, *lengths = inputs
    steps, batch, hidden = y.shape[0], y.shape[1], h0.shape[1]
    reverse = at["reverse"]
    d = gy.apply("gru_scan_backward", gy, y, h0, w_hh, *lengths, reverse=reverse)
    dhp = gy.apply("cat", d[:, :, : 2 * hidden], d[:, :, 3 * hidden : 4 * hidden], axis=2)
    dw = dhp.reshape(steps * batch, 3 * hidden).T @ _h_prev(gy, y, h0, steps, hidden, reverse).reshape(
        steps * batch, hidden
    )
    first = steps - 1 if reverse else 0
    return d[:, :, : 3 * hidden], d[first, :, 4 * hidden :], dw, dhp.sum((0, 1)), *[None for _ in lengths]


_register(
    "gru_scan",
    _gru_infer,
    _gru_vjp,
    gru_forward,
    numpy_gru_forward_cell,
    gru_backward,
    numpy_gru_backward_cell,
    5,
    3,
    "h0",
)


# ================================================================== Elman RNN
# rnn_scan(xp, h0, w_hh; nonlinearity, reverse)
#     xp (T, N, H): ``x_t W_ih^T + b_ih + b_hh``; h0 (N, H); w_hh (H, H); nonlinearity "tanh" or
#     "relu" -> y (T, N, H): h_t = act(xp[t] + h_{t-1} @ w_hh^T) (``torch.nn.RNN``'s equation;
#     Elman 1990). The states are all the backward reads: act'(pre) is 1 - h_t^2 for tanh, and
#     h_t > 0 for relu.
#
# rnn_scan_backward(gy, y, w_hh; nonlinearity, reverse) -> d (T, N, 2H): per step
#     ``[dpre (that of xp[t]), dh_{t-1}]``.
NONLINEARITIES = ("tanh", "relu")


def _nonlinearity(name: str, at) -> None:
    if at.get("nonlinearity") not in NONLINEARITIES:
        raise ArgumentError(f"{name}: nonlinearity must be 'tanh' or 'relu', got {at.get('nonlinearity')!r}")


def _rnn_infer(shapes, dtypes, at):
    shapes, dtypes = _lengths_shape("rnn_scan", shapes, dtypes, 3, 0)
    xs, hs, ws = shapes
    if len(xs) != 3 or tuple(ws) != (xs[2], xs[2]) or tuple(hs) != (xs[1], xs[2]):
        raise ShapeError(f"rnn_scan: expected xp (T, N, H), h0 (N, H) and w_hh (H, H), got {xs}, {hs} and {ws}")
    _nonlinearity("rnn_scan", at)
    _one_float_dtype("rnn_scan", dtypes)
    _some_steps("rnn_scan", xs)
    return tuple(xs), dtypes[0]


def _rnn_backward_infer(shapes, dtypes, at):
    shapes, dtypes = _lengths_shape("rnn_scan_backward", shapes, dtypes, 3, 1)
    gs, ys, ws = shapes
    if tuple(gs) != tuple(ys) or len(ys) != 3 or tuple(ws) != (ys[2], ys[2]):
        raise ShapeError(f"rnn_scan_backward: expected gy and y (T, N, H) and w_hh (H, H), got {gs}, {ys} and {ws}")
    _nonlinearity("rnn_scan_backward", at)
    _one_float_dtype("rnn_scan_backward", dtypes)
    return (ys[0], ys[1], 2 * ys[2]), dtypes[1]


def rnn_forward(xp, h0, w_hh, y, cell, reverse: bool = False, lengths=None) -> None:
    """rnn_scan: :func:`scan_forward` with ``cell(xp, hw, y, t, prev, one)``."""
    scan_forward(xp, h0, w_hh, y, cell, reverse, lengths=lengths)


def rnn_backward(gy, y, w_hh, d, cell, reverse: bool = False, lengths=None) -> None:
    """Fill d (T, N, 2H) from C-contiguous gy, y and w_hh, the recurrence's steps in the opposite
    order: ``cell(gy, y, d, t, after, one)`` writes step t's dpre into d[t, :, :H] from gy[t] and
    d[after, :, H:] (-1: none); then the product ``dpre @ w_hh`` into a buffer of its own, copied
    to d[t, :, H:] (dh_{t-1})."""
    hidden = y.shape[2]
    one = y.dtype.type(1)
    mm = np.empty((y.shape[1], hidden), dtype=y.dtype)
    lengths, moves = full_lengths(lengths, y.shape[0], y.shape[1]), ((0, hidden, hidden),)
    after = -1
    width = column_block(mm.shape[0], hidden, hidden)
    with one_thread():
        for t, _ in reversed(step_order(y.shape[0], reverse)):
            cell(gy, y, d, t, after, one)
            blocked_matmul(d[t, :, :hidden], w_hh, mm, width)
            d[t, :, hidden:] = mm
            hold_backward(gy, d, t, after, lengths, moves, hidden)
            after = t


def _relu(x):
    return OPS["relu"].reference((x,), {})


def _numpy_rnn_forward_cell(act):
    def cell(xp, hw, y, t, prev, one) -> None:
        """Step t of :func:`rnn_forward` in NumPy (the kernel does the same operations in the same order)."""
        y[t] = act(xp[t] + hw)

    return cell


def numpy_rnn_tanh_backward_cell(gy, y, d, t, after, one) -> None:
    """dpre of step t (tanh) in NumPy: (gy[t] + dh from the step after) * (1 - h_t^2)."""
    hidden, h = y.shape[2], y[t]
    dh = gy[t] if after < 0 else gy[t] + d[after, :, hidden:]
    d[t, :, :hidden] = dh * (one - h * h)


def numpy_rnn_relu_backward_cell(gy, y, d, t, after, one) -> None:
    """dpre of step t (relu) in NumPy: the state's gradient where h_t > 0, else 0."""
    hidden = y.shape[2]
    dh = gy[t] if after < 0 else gy[t] + d[after, :, hidden:]
    d[t, :, :hidden] = np.where(y[t] > 0, dh, y.dtype.type(0))


def _rnn_vjp(gy, inputs, y, at):
    xp, h0, w_hh, *lengths = inputs
    steps, batch, hidden = y.shape
    reverse = at["reverse"]
    d = gy.apply("rnn_scan_backward", gy, y, w_hh, *lengths, reverse=reverse, nonlinearity=at["nonlinearity"])
    dpre = d[:, :, :hidden]
    dw = dpre.reshape(steps * batch, hidden).T @ _h_prev(gy, y, h0, steps, hidden, reverse).reshape(
        steps * batch, hidden
    )
    first = steps - 1 if reverse else 0
    return dpre, d[first, :, hidden:], dw, *[None for _ in lengths]


_register(
    "rnn_scan",
    _rnn_infer,
    _rnn_vjp,
    rnn_forward,
    {"tanh": _numpy_rnn_forward_cell(_tanh), "relu": _numpy_rnn_forward_cell(_relu)},
    rnn_backward,
    {"tanh": numpy_rnn_tanh_backward_cell, "relu": numpy_rnn_relu_backward_cell},
    1,
    1,
    "h0",
    arity=3,
    backward_infer=_rnn_backward_infer,
    backward_width=2,
)
