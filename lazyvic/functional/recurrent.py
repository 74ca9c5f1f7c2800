"""The recurrent cells (Elman RNN, LSTM, GRU) and the loops that step them over a sequence.

All recurrent math lives here, so a dedicated kernel can replace it in one place: one step
function per cell type, the cell functions (PyTorch's ``torch.rnn_tanh_cell``, ``rnn_relu_cell``,
``lstm_cell``, ``gru_cell``) and one ``*_layer`` function per cell type that runs one layer in one
direction over a whole sequence — the input projection of every time step as one matrix product,
then the recurrence: on the CPU one ``rnn_scan`` / ``lstm_scan`` / ``gru_scan`` primitive
(``ops/recurrent.py``: a plan step of one product and one cell kernel per time step, its
backward the same loop in reverse), otherwise unrolled into one small product and a few
elementwise nodes per step. ``nn.RNN``/``LSTM``/``GRU`` stack these layers.

Equations and gate orders are those of PyTorch's documentation (``torch.nn.LSTM``: i, f, g, o;
``torch.nn.GRU``: r, z, n, with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``; Hochreiter &
Schmidhuber 1997, Cho et al. 2014). Shapes: x (T, N, I), h and c (N, H), w_ih (G*H, I),
w_hh (G*H, H), b_ih and b_hh (G*H,) or None, with G = 1 (RNN), 4 (LSTM) or 3 (GRU).
"""

from __future__ import annotations

from lazyvic.errors import ShapeError
from lazyvic.functional.linear import linear
from lazyvic.indexing import stack
from lazyvic.modes import is_grad_enabled
from lazyvic.ops.recurrent import COPY_MIN_ROWS
from lazyvic.tensor import Tensor, where
from lazyvic.trace import composite


def _bias_sum(b_ih, b_hh):
    if b_ih is None:
        return b_hh
    return b_ih if b_hh is None else b_ih + b_hh


def _projected(x: Tensor, w_ih: Tensor, bias) -> Tensor:
    """The input projection of every step at once: (T, N, I) -> (T, N, G*H), one product."""
    t, n, i = x.shape
    return linear(x.reshape(t * n, i), w_ih, bias).reshape(t, n, w_ih.shape[0])


def _project(x: Tensor, w_ih: Tensor, bias) -> tuple:
    """:func:`_projected` as T tensors (N, G*H), one per step of an unrolled layer. (The
    backward joins the T steps' gradients by one cat: autograd/engine._Terms.)"""
    xp = _projected(x, w_ih, bias)
    return tuple(xp[k] for k in range(x.shape[0]))


# ============================================================== one step
# Each step multiplies by its own ``w_hh.T`` view: the gradient of w_hh is then the step's
# product g^T h in w_hh's layout (ops/matmul._vjp), and the sum over the steps reads contiguous
# terms. Through one shared view, the steps' gradients were summed in the view's layout and
# read back transposed (3.6 ms of a 35-step LSTM language model's training step, per layer).
# Without gradients, the steps share one row-major copy of w_hh^T (``recurrent_weight``).
# A row-major copy of w_hh^T pays for itself from this many rows (the batch) and steps on.
# OpenBLAS (one thread), h (N, 128) @ (128, 512), from the transposed view / from the copy:
# N = 1: 3.6 / 3.4 us, 2: 3.5 / 4.6, 4: 28.3 / 5.0, 8: 32.2 / 9.1, 20: 41.5 / 25.5; the copy
# itself (NumPy) 66 us. 2-layer 35-step LSTM inference, batch 20: 4,220-4,340 -> 4,600-4,960
# sequences/s; GRU: 5,560-5,630 -> 6,930-7,240 (benchmarks/rnn.py --quick, interleaved runs).
RECURRENT_COPY_MIN_ROWS = COPY_MIN_ROWS  # the scans' loops read their copy from as many rows on
RECURRENT_COPY_MIN_STEPS = 4


def recurrent_weight(w_hh: Tensor, rows: int, steps: int) -> Tensor | None:
    """``w_hh^T`` (H, G*H) as a row-major copy that every step's product h (rows, H) @ w_hh^T
    reads, when no gradient flows to w_hh and the batch and the sequence are long enough
    (above), else None: each step then reads its own ``w_hh.T`` view (see above). The
    interpreter keeps computed values row-major too, so both run the same BLAS call and give
    the same bits (runtime/interpreter.py)."""
    if (w_hh.requires_grad and is_grad_enabled()) or rows < RECURRENT_COPY_MIN_ROWS or steps < RECURRENT_COPY_MIN_STEPS:
        return None
    return w_hh.T.clone()


def _times(h: Tensor, w_hh: Tensor, w_t) -> Tensor:
    return h @ (w_hh.T if w_t is None else w_t)


def _rnn_step(xp: Tensor, h: Tensor, w_hh: Tensor, nonlinearity: str, w_t=None) -> Tensor:
    pre = xp + _times(h, w_hh, w_t)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def _lstm_step(xp: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, w_t=None) -> tuple:
    gates = xp + _times(h, w_hh, w_t)
    i, f, g, o = gates.chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(xp: Tensor, h: Tensor, w_hh: Tensor, b_hh, w_t=None) -> Tensor:
    hp = _times(h, w_hh, w_t)
    if b_hh is not None:
        hp = hp + b_hh
    x_r, x_z, x_n = xp.chunk(3, 1)
    h_r, h_z, h_n = hp.chunk(3, 1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return n + z * (h - n)  # (1 - z) * n + z * h


# ============================================================== cells
def _check_cell(name: str, input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor, gates: int) -> None:
    hidden = w_hh.shape[1] if w_hh.ndim == 2 else -1
    if w_ih.ndim != 2 or w_hh.shape != (gates * hidden, hidden) or w_ih.shape[0] != gates * hidden:
        raise ShapeError(
            f"{name}: expected w_ih ({gates}*H, I) and w_hh ({gates}*H, H), got {w_ih.shape} and {w_hh.shape}"
        )
    if input.ndim != 2 or input.shape[1] != w_ih.shape[1]:
        raise ShapeError(f"{name}: expected input (N, {w_ih.shape[1]}), got {input.shape}")
    if hx.shape != (input.shape[0], hidden):
        raise ShapeError(f"{name}: expected hidden state ({input.shape[0]}, {hidden}), got {hx.shape}")


def rnn_tanh_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih=None, b_hh=None) -> Tensor:
    """One Elman step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``; input (N, I), hx (N, H)."""
    _check_cell("rnn_tanh_cell", input, hx, w_ih, w_hh, 1)
    return _rnn_step(linear(input, w_ih, _bias_sum(b_ih, b_hh)), hx, w_hh, "tanh")


def rnn_relu_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih=None, b_hh=None) -> Tensor:
    """One Elman step with ReLU: ``h' = relu(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    _check_cell("rnn_relu_cell", input, hx, w_ih, w_hh, 1)
    return _rnn_step(linear(input, w_ih, _bias_sum(b_ih, b_hh)), hx, w_hh, "relu")


def lstm_cell(input: Tensor, hx: tuple, w_ih: Tensor, w_hh: Tensor, b_ih=None, b_hh=None) -> tuple:
    """One LSTM step; ``hx = (h, c)`` each (N, H); returns ``(h', c')``."""
    h, c = hx
    _check_cell("lstm_cell", input, h, w_ih, w_hh, 4)
    if c.shape != h.shape:
        raise ShapeError(f"lstm_cell: expected cell state {h.shape}, got {c.shape}")
    return _lstm_step(linear(input, w_ih, _bias_sum(b_ih, b_hh)), h, c, w_hh)


def gru_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih=None, b_hh=None) -> Tensor:
    """One GRU step; input (N, I), hx (N, H); returns h' (N, H)."""
    _check_cell("gru_cell", input, hx, w_ih, w_hh, 3)
    return _gru_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh)


# ============================================================== one layer over a sequence
def _steps(length: int, reverse: bool):
    return range(length - 1, -1, -1) if reverse else range(length)


def _running(lengths, t: int):
    """(N, 1) bool: the rows whose sequence runs at step t (``t < lengths``); None: every row."""
    return None if lengths is None else (lengths > t).reshape(lengths.shape[0], 1)


def _keep(running, new: Tensor, old: Tensor) -> Tensor:
    """The new state where the sequence runs (``running``, of :func:`_running`), else the old one."""
    return new if running is None else where(running, new, old)


def _scan_inputs(lengths) -> tuple:
    """The scans' optional last input: the lengths, int64 (N,)."""
    return () if lengths is None else (lengths.long(),)


# ============================================================== ONNX export
# An export records the unrolled steps (``_scans``: the scans have no ONNX rule) and marks the
# layer's outputs as the outputs of one ONNX RNN / LSTM / GRU node (opset 7 and later; the
# operator specification's equations are PyTorch's with the gates reordered and, for the GRU,
# ``linear_before_reset=1``): a layer in one direction is one node, its inputs W, R and B the
# parameters in ONNX's gate order, so the graph has no per-step nodes and its sequence and
# batch axes may be dynamic. Rows of different lengths (packed sequences) stay unrolled: ONNX
# zeroes the outputs past a row's length, where lazyvic's layers hold the state.
_ONNX_GATES = {"RNN": (0,), "LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2)}  # ONNX's order of PyTorch's gates


def _onnx_order(w, cell: str, hidden: int):
    """w (G*H, ...) or (G*H,) with its gate blocks in ONNX's order (LSTM i, o, f, c; GRU z, r, h)."""
    from lazyvic.indexing import cat

    order = _ONNX_GATES[cell]
    return w if order == (0,) else cat([w[k * hidden : (k + 1) * hidden] for k in order], 0)


def _onnx_node(b, names, at) -> str:
    """Emit (once per layer: the builder's memo) the layer's ONNX node and return the output
    ``at["out"]`` names: Y (T, 1, N, H) squeezed to (T, N, H), or Y_h / Y_c (1, N, H) to (N, H)."""
    key = ("recurrent", at["cell"], at["direction"], tuple(names))
    outs = b.memo.get(key)
    if outs is None:
        attrs = dict(hidden_size=int(at["hidden"]), direction=at["direction"])
        if at["cell"] == "RNN":
            attrs["activations"] = [at["activation"]]
        if at["cell"] == "GRU":
            attrs["linear_before_reset"] = 1
        outs = b.memo[key] = b.node_outputs(at["cell"], list(names), 3 if at["cell"] == "LSTM" else 2, **attrs)
    which = ("Y", "Y_h", "Y_c").index(at["out"])
    return b.node("Squeeze", [outs[which], b.ints([1 if which == 0 else 0])])


def _mark_onnx(cell: str, outputs: tuple, x, states: tuple, w_ih, w_hh, b_ih, b_hh, reverse: bool, lengths, **attrs):
    """``outputs`` (y, h_T[, c_T]) marked as one ONNX ``cell`` node's Y, Y_h (and Y_c) while an
    export records and every row runs the whole sequence; else returned as they are."""
    if not composite.active() or lengths is not None:
        return outputs
    hidden = w_hh.shape[1]
    w = _onnx_order(w_ih, cell, hidden).reshape(1, w_ih.shape[0], w_ih.shape[1])
    r = _onnx_order(w_hh, cell, hidden).reshape(1, w_hh.shape[0], hidden)
    bias = None
    if b_ih is not None or b_hh is not None:
        parts = [w_hh.new_zeros(w_hh.shape[0]) if v is None else _onnx_order(v, cell, hidden) for v in (b_ih, b_hh)]
        from lazyvic.indexing import cat

        bias = cat(parts, 0).reshape(1, 2 * w_hh.shape[0])
    initial = tuple(s.reshape(1, *s.shape) for s in states)
    inputs = (x, w, r, bias, None, *initial)
    direction = "reverse" if reverse else "forward"
    return tuple(
        composite.mark(
            t, _onnx_node, inputs, min_opset=7, cell=cell, out=out, hidden=hidden, direction=direction, **attrs
        )
        for t, out in zip(outputs, ("Y", "Y_h", "Y_c"))
    )


def rnn_layer(
    x, h, w_ih, w_hh, b_ih=None, b_hh=None, reverse: bool = False, nonlinearity: str = "tanh", lengths=None
) -> tuple:
    """An Elman layer over x (T, N, I) from h (N, H), backwards in time when ``reverse``: returns
    the outputs (T, N, H) (in time order) and the last hidden state (N, H). ``lengths``: for
    sequences of different lengths, an (N,) integer tensor; row n runs steps t < lengths[n] (a
    finished or, backwards, not yet started sequence keeps its state, which is also its output
    there).

    On the CPU in float32/float64, the recurrence is one ``rnn_scan`` primitive (as
    :func:`lstm_layer`'s ``lstm_scan``); otherwise it is unrolled."""
    bias = _bias_sum(b_ih, b_hh)
    if nonlinearity in ("tanh", "relu") and _scans(x, (h, w_ih, w_hh, bias)):
        xp = _projected(x, w_ih, bias)
        args = (xp, h, w_hh, *_scan_inputs(lengths))
        y = xp.apply("rnn_scan", *args, reverse=bool(reverse), nonlinearity=nonlinearity)
        return y, y[0 if reverse else x.shape[0] - 1]
    xp = _project(x, w_ih, bias)
    outs = [None] * x.shape[0]
    w_t = recurrent_weight(w_hh, x.shape[1], x.shape[0])
    h0 = h
    for t in _steps(x.shape[0], reverse):
        h = outs[t] = _keep(_running(lengths, t), _rnn_step(xp[t], h, w_hh, nonlinearity, w_t), h)
    activation = {"tanh": "Tanh", "relu": "Relu"}.get(nonlinearity)
    if activation is None:
        return stack(outs, 0), h
    return _mark_onnx(
        "RNN", (stack(outs, 0), h), x, (h0,), w_ih, w_hh, b_ih, b_hh, reverse, lengths, activation=activation
    )


def _scans(x: Tensor, tensors) -> bool:
    """Whether an RNN, LSTM or GRU layer runs as one ``rnn_scan`` / ``lstm_scan`` / ``gru_scan``
    primitive (ops/recurrent.py): on the CPU, float32 or float64 throughout (``tensors`` may hold
    None, an absent bias), outside an ONNX export (which records the unrolled steps and marks
    them as one ONNX node: ``_mark_onnx``; the scans have no ONNX rule, and ONNX's LSTM and GRU
    nodes return no gates)."""
    dtype = x.dtype
    return (
        x.device == "cpu"
        and dtype.name in ("float32", "float64")
        and all(t is None or (t.dtype is dtype and t.device == "cpu") for t in tensors)
        and not composite.active()
    )


def lstm_layer(x, h, c, w_ih, w_hh, b_ih=None, b_hh=None, reverse: bool = False, lengths=None) -> tuple:
    """An LSTM layer over x (T, N, I) from (h, c): returns the outputs (T, N, H), h_T and c_T
    (``lengths`` as :func:`rnn_layer`).

    On the CPU in float32/float64, the recurrence is one ``lstm_scan`` primitive
    (ops/recurrent.py: one library step per layer, forward and backward); otherwise it is
    unrolled into about a dozen nodes per step."""
    bias = _bias_sum(b_ih, b_hh)
    if _scans(x, (h, c, w_ih, w_hh, bias)):
        xp = _projected(x, w_ih, bias)
        y = xp.apply("lstm_scan", xp, h, c, w_hh, *_scan_inputs(lengths), reverse=bool(reverse))
        hidden, last = h.shape[1], 0 if reverse else x.shape[0] - 1
        return y[:, :, :hidden], y[last, :, :hidden], y[last, :, hidden : 2 * hidden]
    xp = _project(x, w_ih, bias)
    outs = [None] * x.shape[0]
    w_t = recurrent_weight(w_hh, x.shape[1], x.shape[0])
    states = (h, c)
    for t in _steps(x.shape[0], reverse):
        h_new, c_new = _lstm_step(xp[t], h, c, w_hh, w_t)
        running = _running(lengths, t)
        h, c = _keep(running, h_new, h), _keep(running, c_new, c)
        outs[t] = h
    return _mark_onnx("LSTM", (stack(outs, 0), h, c), x, states, w_ih, w_hh, b_ih, b_hh, reverse, lengths)


def gru_layer(x, h, w_ih, w_hh, b_ih=None, b_hh=None, reverse: bool = False, lengths=None) -> tuple:
    """A GRU layer over x (T, N, I) from h: returns the outputs (T, N, H) and h_T (``lengths`` as
    :func:`rnn_layer`; one ``gru_scan`` primitive where :func:`lstm_layer` has one ``lstm_scan``)."""
    if _scans(x, (h, w_ih, w_hh, b_ih, b_hh)):
        xp = _projected(x, w_ih, b_ih)
        bias = b_hh if b_hh is not None else w_hh.new_zeros(w_hh.shape[0])
        y = xp.apply("gru_scan", xp, h, w_hh, bias, *_scan_inputs(lengths), reverse=bool(reverse))
        hidden = h.shape[1]
        return y[:, :, :hidden], y[0 if reverse else x.shape[0] - 1, :, :hidden]
    xp = _project(x, w_ih, b_ih)
    outs = [None] * x.shape[0]
    w_t = recurrent_weight(w_hh, x.shape[1], x.shape[0])
    h0 = h
    for t in _steps(x.shape[0], reverse):
        h = outs[t] = _keep(_running(lengths, t), _gru_step(xp[t], h, w_hh, b_hh, w_t), h)
    return _mark_onnx("GRU", (stack(outs, 0), h), x, (h0,), w_ih, w_hh, b_ih, b_hh, reverse, lengths)
