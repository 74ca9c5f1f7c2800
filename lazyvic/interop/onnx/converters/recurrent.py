"""Recurrent layers: RNN GRU LSTM, with the spec's equations; the input projection of every step
is one matmul up front. An RNN whose activations are all Tanh or all Relu, an LSTM with the
default activations and no peepholes, and a GRU with the default activations and
``linear_before_reset=1`` (PyTorch's GRU, as its exporter writes it) are PyTorch's layers (LSTM
and GRU with their gates reordered: ``functional.recurrent.rnn_layer`` / ``lstm_layer`` /
``gru_layer``: one scan primitive per direction on the CPU, ``ops/recurrent.py``, sequence_lens
its lengths input). Others are unrolled over the (static) sequence length. Either way, steps past
a batch entry's sequence_lens leave its state unchanged and output zeros.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from lazyvic.creation import zeros
from lazyvic.functional.recurrent import gru_layer, lstm_layer, recurrent_weight, rnn_layer
from lazyvic.indexing import stack
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.converters.activation import softplus
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor, where

# name -> (number of alpha/beta parameters it takes from activation_alpha/beta, function, defaults)
_ACTIVATIONS = {
    "sigmoid": (0, lambda x, a, b: x.sigmoid(), ()),
    "tanh": (0, lambda x, a, b: x.tanh(), ()),
    "relu": (0, lambda x, a, b: x.relu(), ()),
    "softsign": (0, lambda x, a, b: x / (x.abs() + 1.0), ()),
    "softplus": (0, lambda x, a, b: softplus(x), ()),
    "leakyrelu": (1, lambda x, a, b: where(x >= 0, x, x * a), (0.01,)),
    "thresholdedrelu": (1, lambda x, a, b: where(x >= a, x, 0.0), (1.0,)),
    "elu": (1, lambda x, a, b: where(x >= 0, x, (x.exp() - 1.0) * a), (1.0,)),
    "affine": (2, lambda x, a, b: x * a + b, (1.0, 0.0)),
    "scaledtanh": (2, lambda x, a, b: (x * b).tanh() * a, (1.0, 1.0)),
    "hardsigmoid": (2, lambda x, a, b: (x * a + b).clamp(0.0, 1.0), (0.2, 0.5)),
}


def _check(ctx):
    if ctx.attr("clip") is not None:
        return f"{ctx.op} with clip"
    unknown = [a for a in ctx.attr("activations") or [] if a.lower() not in _ACTIVATIONS]
    return f"{ctx.op} with activation {unknown[0]!r}" if unknown else None


def _lstm_check(ctx):
    if ctx.attr("clip") is None and ctx.attr("input_forget", 0):  # (_check names clip first)
        return "LSTM with input_forget=1"
    return _check(ctx)


def _activations(ctx, defaults: list, directions: int) -> list:
    """Per direction, the activation callables (f; f, g; or f, g, h) with their alpha/beta bound."""
    per = len(defaults)
    names = ctx.attr("activations") or defaults * directions
    if len(names) != per * directions:
        raise ctx.error(f"activations {names} must name {per} functions per direction ({directions})")
    alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
    bound = []
    for name in names:
        count, fn, values = _ACTIVATIONS[name.lower()]
        a = alphas.pop(0) if count >= 1 and alphas else (values[0] if count >= 1 else None)
        b = betas.pop(0) if count >= 2 and betas else (values[1] if count >= 2 else None)
        bound.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [bound[d * per : (d + 1) * per] for d in range(directions)]


class _Cell(NamedTuple):
    """One direction's recurrent weights: R (gates * hidden, hidden), its bias, the activations."""

    direction: int
    hidden: int
    r: Tensor
    rb: Tensor
    acts: list
    rt: Tensor  # R^T (hidden, gates * hidden): the view, or a row-major copy (recurrent_weight)


def _reordered(t: Tensor, order: tuple, hidden: int) -> Tensor:
    """The gate blocks (``hidden`` rows each) of ``t`` along axis 0 in ``order``."""
    rows = np.concatenate([np.arange(k * hidden, (k + 1) * hidden) for k in order])
    return t.index_select(0, const_tensor(rows))


def _unroll(
    ctx, x, w, r, b, sequence_lens, initial_h, initial_c, gates: int, defaults: list, step: Callable, layer=None
):
    """The layer over every step and direction: ``step(xt, h, c, cell) -> (h, c)`` is one cell
    update, with ``xt`` the step's input projection (batch, gates * hidden). With ``layer`` and the
    default activations, ``layer(xs, W, R, B, h0, c0, reverse, lengths) -> (ys, h, c)`` runs a
    direction instead (``lengths``: sequence_lens as an int64 tensor, or None when every sequence
    runs the whole length; its outputs past a sequence's end are then set to zero). Returns Y,
    Y_h, Y_c."""
    xs, weight, recur = ctx.tensor(x), ctx.tensor(w), ctx.tensor(r)
    layout = int(ctx.attr("layout", 0)) if ctx.version >= 14 else 0
    if layout:
        xs = xs.transpose(0, 1)  # (batch, seq, input) -> (seq, batch, input)
    steps, batch, _ = xs.shape
    hidden = int(ctx.attr("hidden_size", recur.shape[-1]))
    direction = ctx.attr("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    if weight.shape[:2] != (directions, gates * hidden) or recur.shape[1:] != (gates * hidden, hidden):
        raise ctx.error(f"W {weight.shape} and R {recur.shape} do not fit hidden_size={hidden}, direction={direction}")
    bias = ctx.tensor(b) if b is not None else zeros(directions, 2 * gates * hidden, dtype=xs.dtype)

    def state(value):
        if value is None:
            return zeros(directions, batch, hidden, dtype=xs.dtype)
        t = ctx.tensor(value)
        return t.transpose(0, 1) if layout else t

    h0, c0 = state(initial_h), state(initial_c)
    valid = None
    if sequence_lens is not None:
        lens = np.array(ctx.ints(sequence_lens, "sequence_lens"))
        if not (lens == steps).all():
            valid = np.arange(steps)[:, None, None] < lens[None, :, None]  # (seq, batch, 1)
    acts = _activations(ctx, defaults, directions)
    names = [a.lower() for a in ctx.attr("activations") or defaults * directions]
    scans = layer is not None and names == [a.lower() for a in defaults] * directions
    lengths = None if valid is None else const_tensor(lens.astype(np.int64))
    outputs, finals, cells = [], [], []
    for d in range(directions):
        if scans:
            ys, h, c = layer(xs, weight[d], recur[d], bias[d], h0[d], c0[d], direction == "reverse" or d == 1, lengths)
            outputs.append(ys if valid is None else where(const_tensor(valid), ys, 0.0))  # ONNX: zeros past the end
            finals.append(h)
            cells.append(c)
            continue
        wd = weight[d]
        wb, rb = bias[d, : gates * hidden], bias[d, gates * hidden :]
        rt = recurrent_weight(recur[d], batch, steps)
        cell = _Cell(d, hidden, recur[d], rb, acts[d], recur[d].T if rt is None else rt)
        projected = (xs.reshape(steps * batch, -1) @ wd.T + wb).reshape(steps, batch, gates * hidden)
        h, c = h0[d], c0[d]
        ys = [None] * steps
        reverse = direction == "reverse" or d == 1
        for t in range(steps - 1, -1, -1) if reverse else range(steps):
            hn, cn = step(projected[t], h, c, cell)
            if valid is not None:
                keep = const_tensor(valid[t])
                ys[t] = where(keep, hn, 0.0)
                h, c = where(keep, hn, h), where(keep, cn, c)
            else:
                ys[t], h, c = hn, hn, cn
        outputs.append(stack(ys, 0))
        finals.append(h)
        cells.append(c)
    y = stack(outputs, 1)  # (seq, directions, batch, hidden)
    y_h, y_c = stack(finals, 0), stack(cells, 0)
    if layout:
        y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
    return y, y_h, y_c


@register("RNN", since=(7, 14, 22), check=_check)
def rnn(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None):
    def step(xt, h, c, cell):
        (f,) = cell.acts
        return f(xt + h @ cell.rt + cell.rb), c

    # One rnn_scan per direction when every direction's activation is Tanh (the default) or every
    # one Relu (PyTorch's nonlinearity="relu" exports so): ONNX's W, R and B are PyTorch's.
    names = {a.lower() for a in ctx.attr("activations") or ["Tanh"]}
    nonlinearity = names.pop() if len(names) == 1 and names <= {"tanh", "relu"} else None

    def layer(xs, wd, rd, bd, h, c, reverse, lengths):
        n = rd.shape[1]
        ys, h = rnn_layer(xs, h, wd, rd, bd[:n], bd[n:], reverse, nonlinearity, lengths)
        return ys, h, c

    defaults = ["Relu"] if nonlinearity == "relu" else ["Tanh"]
    y, y_h, _ = _unroll(
        ctx, x, w, r, b, sequence_lens, initial_h, None, 1, defaults, step, layer if nonlinearity else None
    )
    return y, y_h


@register("GRU", since=(7, 14, 22), check=_check)
def gru(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None):
    linear_before_reset = ctx.attr("linear_before_reset", 0)

    def step(xt, h, c, cell):  # gates z, r, h
        f, g = cell.acts
        n, rt, rb = cell.hidden, cell.rt, cell.rb
        bh = rb[2 * n :]
        if linear_before_reset:  # PyTorch's GRU: one product of h by all of R per step
            hr = h @ rt + rb
            z = f(xt[:, :n] + hr[:, :n])
            reset = f(xt[:, n : 2 * n] + hr[:, n : 2 * n])
            cand = g(xt[:, 2 * n :] + reset * hr[:, 2 * n :])
        else:
            hr = h @ rt[:, : 2 * n] + rb[: 2 * n]
            z = f(xt[:, :n] + hr[:, :n])
            reset = f(xt[:, n : 2 * n] + hr[:, n:])
            cand = g(xt[:, 2 * n :] + (reset * h) @ rt[:, 2 * n :] + bh)
        return (1.0 - z) * cand + z * h, c

    def layer(xs, wd, rd, bd, h, c, reverse, lengths):  # ONNX gates z, r, h; PyTorch's r, z, n
        n = rd.shape[1]
        o = (1, 0, 2)
        ys, h = gru_layer(xs, h, _reordered(wd, o, n), _reordered(rd, o, n), _reordered(bd[: 3 * n], o, n),
                          _reordered(bd[3 * n :], o, n), reverse, lengths)  # fmt: skip
        return ys, h, c

    y, y_h, _ = _unroll(
        ctx, x, w, r, b, sequence_lens, initial_h, None, 3, ["Sigmoid", "Tanh"], step,
        layer if linear_before_reset else None,
    )  # fmt: skip
    return y, y_h


@register("LSTM", since=(7, 14, 22), check=_lstm_check)
def lstm(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, peepholes=None):
    def step(xt, h, c, cell):  # gates i, o, f, c; peepholes i, o, f
        f, g, hact = cell.acts
        n = cell.hidden
        pre = xt + h @ cell.rt + cell.rb
        gi, go, gf, gc = (pre[:, k * n : (k + 1) * n] for k in range(4))
        if peepholes is not None:
            pd = ctx.tensor(peepholes)[cell.direction]
            gi, gf = gi + pd[:n] * c, gf + pd[2 * n :] * c
        cn = f(gf) * c + f(gi) * g(gc)
        if peepholes is not None:
            go = go + ctx.tensor(peepholes)[cell.direction][n : 2 * n] * cn
        return f(go) * hact(cn), cn

    def layer(xs, wd, rd, bd, h, c, reverse, lengths):  # ONNX gates i, o, f, c; PyTorch's i, f, g, o
        n = rd.shape[1]
        o = (0, 2, 3, 1)
        return lstm_layer(xs, h, c, _reordered(wd, o, n), _reordered(rd, o, n), _reordered(bd[: 4 * n], o, n),
                          _reordered(bd[4 * n :], o, n), reverse, lengths)  # fmt: skip

    defaults = ["Sigmoid", "Tanh", "Tanh"]
    return _unroll(
        ctx, x, w, r, b, sequence_lens, initial_h, initial_c, 4, defaults, step, layer if peepholes is None else None
    )
