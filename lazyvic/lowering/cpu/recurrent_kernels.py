"""The cell kernels of ``lstm_scan``, ``gru_scan``, ``rnn_scan`` and their backwards (ops/recurrent.py), in Numba.

Each kernel computes one time step over all rows; the loop over the steps and the products
``h @ w_hh^T`` and ``dgates @ w_hh`` are :func:`lazyvic.ops.recurrent.scan_forward`,
``lstm_backward`` and ``gru_backward``, shared with the NumPy reference. The kernels do the NumPy cells' float
operations in the same order, each rounded to the dtype (no fused multiply-add: Numba does not
contract without ``fastmath``), with the kernels' activations (``kernel_lib.sigmoid_f32`` /
``tanh_f32`` for float32, the C library's for float64), so both tiers give the same bits
(``tests/nn/test_rnn.py`` checks). A cell computes any range of units (each unit's columns
depend on its own only), so a large step is split: a forward's groups of units
(``recurrent.unit_groups``: each group's product and cell) and an LSTM backward's cell ranges
and product column blocks run side by side on Numba's threads where the plan's team allows
(``lowering/cpu/load.on_team``), one parallel region per step and phase; small steps stay on the
calling thread (a region costs a few microseconds: at batch 4 x 128 two groups on two threads
took 22 us a step against 12 in one).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange, types
from numba.core.registry import CPUDispatcher
from numba.extending import overload

from lazyvic.lowering import kernel_lib
from lazyvic.lowering.cpu import native
from lazyvic.lowering.cpu.load import on_team
from lazyvic.lowering.kernel_files import inlined_sources_hash, stamp_with
from lazyvic.ops import recurrent
from lazyvic.ops.blas import one_thread

native.blas()  # NumPy's OpenBLAS bound as the symbols the loops' products call (any process)


def _typed(f32, f64):
    """A function of one float that compiled code calls as ``f32`` for a float32 argument and
    ``f64`` for a float64 one (a Numba overload; never called from Python)."""

    def stub(x):  # pragma: no cover - replaced by the overload in compiled code
        raise NotImplementedError

    @overload(stub, inline="always")
    def _choose(x):
        return (lambda x: f32(x)) if x == types.float32 else (lambda x: f64(x))

    return stub


_sigmoid = _typed(kernel_lib.sigmoid_f32, kernel_lib.sigmoid_f64)
_tanh = _typed(kernel_lib.tanh_f32, math.tanh)


@njit(cache=True, inline="always")
def _products(a, ao, b, c, kind, h, width):
    """c = a[ao:] @ b as the column blocks of ``recurrent.blocked_matmul``: one call of header h
    (made for the first block) per ``width`` columns of b and c."""
    for s in range(0, c.shape[1], width):
        native.product(a, ao, b, s, c, s, kind, h)


# Each loop below stores one stream: a loop storing the six values of an element (and reading
# seven) did not vectorize (LLVM's runtime alias checks), 21 us for a step of 8 x 64 against
# 2.6 us in passes.
@njit(cache=True, error_model="numpy", boundscheck=False)
def lstm_forward_cell(xp, hw, c0, y, t, prev, one, j0, j1, base):
    """y[t] = [h, c, i, f, g, o] of step t from xp[t] + hw (hw = h_prev @ w_hh^T) and the cell
    state of step ``prev`` (-1: c0), for the units j0 .. j1 (-1: all), whose gates are hw's
    columns base + k*U + (j - j0) (U = j1 - j0; all units: k*H + j)."""
    rows, hidden = c0.shape
    end = hidden if j1 < 0 else j1
    u = end - j0
    for n in range(rows):
        x, w, yr = xp[t, n], hw[n, base:], y[t, n]
        cp = c0[n, j0:end] if prev < 0 else y[prev, n, hidden + j0 : hidden + end]
        for k in (0, 1, 3):  # i, f, o
            xk, wk, yk = x[k * hidden + j0 :], w[k * u :], yr[(k + 2) * hidden + j0 :]
            for j in range(u):
                yk[j] = _sigmoid(xk[j] + wk[j])
        xg, wg, g_ = x[2 * hidden + j0 :], w[2 * u :], yr[4 * hidden + j0 :]
        for j in range(u):
            g_[j] = _tanh(xg[j] + wg[j])
        h_, c_, i_, f_, o_ = (
            yr[j0:],
            yr[hidden + j0 :],
            yr[2 * hidden + j0 :],
            yr[3 * hidden + j0 :],
            yr[5 * hidden + j0 :],
        )
        for j in range(u):
            a = f_[j] * cp[j]
            b = i_[j] * g_[j]
            c_[j] = a + b
        for j in range(u):
            h_[j] = o_[j] * _tanh(c_[j])


@njit(cache=True, inline="always")
def _gate_grad(out, dc, other, gy, gate, one, u):
    """out[j] = (dc[j] * other[j] + gy[j]) * gate[j] * (1 - gate[j]): a sigmoid gate's
    pre-activation gradient, each operation rounded in this order."""
    for j in range(u):
        v = dc[j] * other[j]
        v = v + gy[j]
        g = gate[j]
        out[j] = v * g * (one - g)


@njit(cache=True, error_model="numpy", boundscheck=False)
def lstm_backward_cell(gy, y, c0, d, t, prev, after, one, dh, dc, j0, j1):
    """d[t, :, :5H] = [dgates, dc_prev] of step t (which read the states of step ``prev``, -1:
    c0), from gy[t] and d[after, :, 4H:] of the step that read t's states (-1: none); dh and dc
    (N, H) are scratch for the states' total gradients. For the units j0 .. j1 (-1: all): each
    unit's columns depend on its own only. (Kept apart from d: a loop storing d[t, n, 3H + j]
    while loading d[t, n, 5H + j] did not vectorize, 27 us against 3.)"""
    rows, hidden = c0.shape
    end = hidden if j1 < 0 else j1
    u = end - j0
    for n in range(rows):
        g_, yr, dr, h_, c_ = gy[t, n], y[t, n], d[t, n], dh[n, j0:end], dc[n, j0:end]
        cp = c0[n, j0:end] if prev < 0 else y[prev, n, hidden + j0 : hidden + end]
        gh, gc, gi = g_[j0:end], g_[hidden + j0 : hidden + end], g_[2 * hidden + j0 : 2 * hidden + end]
        gf, gg, go = (
            g_[3 * hidden + j0 : 3 * hidden + end],
            g_[4 * hidden + j0 : 4 * hidden + end],
            g_[5 * hidden + j0 :],
        )
        yc, yi, yf = yr[hidden + j0 : hidden + end], yr[2 * hidden + j0 : 2 * hidden + end], yr[3 * hidden + j0 :]
        yg, yo = yr[4 * hidden + j0 : 4 * hidden + end], yr[5 * hidden + j0 :]
        if after >= 0:
            nr = d[after, n]
            nh, nc = nr[5 * hidden + j0 : 5 * hidden + end], nr[4 * hidden + j0 : 4 * hidden + end]
            for j in range(u):
                h_[j] = gh[j] + nh[j]
            for j in range(u):
                c_[j] = gc[j] + nc[j]
        else:
            for j in range(u):
                h_[j] = gh[j]
            for j in range(u):
                c_[j] = gc[j]
        for j in range(u):  # dc += dh * o * (1 - tanh(c)^2)
            tc = _tanh(yc[j])
            a = h_[j] * yo[j]
            b = tc * tc
            b = one - b
            a = a * b
            c_[j] = c_[j] + a
        di_, df_, dg_ = dr[j0:end], dr[hidden + j0 : hidden + end], dr[2 * hidden + j0 : 2 * hidden + end]
        do_, dcp = dr[3 * hidden + j0 : 3 * hidden + end], dr[4 * hidden + j0 : 4 * hidden + end]
        for j in range(u):  # o
            tc = _tanh(yc[j])
            do = h_[j] * tc
            do = do + go[j]
            o = yo[j]
            do_[j] = do * o * (one - o)
        _gate_grad(di_, c_, yg, gi, yi, one, u)  # i: (dc * g + gy_i) * i * (1 - i)
        _gate_grad(df_, c_, cp, gf, yf, one, u)  # f: (dc * c_prev + gy_f) * f * (1 - f)
        for j in range(u):  # g
            dg = c_[j] * yi[j]
            dg = dg + gg[j]
            g = yg[j]
            dg_[j] = dg * (one - g * g)
        for j in range(u):  # dc_prev
            dcp[j] = c_[j] * yf[j]


# ------------------------------------------------------------------ GRU (ops/recurrent.py)
@njit(cache=True, error_model="numpy", boundscheck=False)
def gru_forward_cell(xp, hw, h0, b, y, t, prev, one, j0, j1, base):
    """y[t] = [h, r, z, n, hn] of step t from xp[t], hw = h_prev @ w_hh^T and b_hh (hw is
    overwritten), for the units j0 .. j1 (-1: all) whose gates are hw's columns as
    :func:`lstm_forward_cell`'s."""
    rows, hidden = h0.shape
    end = hidden if j1 < 0 else j1
    u = end - j0
    for n in range(rows):
        x, w, yr = xp[t, n], hw[n, base:], y[t, n]
        hp = h0[n, j0:end] if prev < 0 else y[prev, n, j0:end]
        for k in range(2):  # r, z
            xk, wk, bk, yk = x[k * hidden + j0 :], w[k * u :], b[k * hidden + j0 :], yr[(k + 1) * hidden + j0 :]
            for j in range(u):
                a = wk[j] + bk[j]
                yk[j] = _sigmoid(xk[j] + a)
        wn, bn, hn = w[2 * u :], b[2 * hidden + j0 :], yr[4 * hidden + j0 :]
        for j in range(u):
            hn[j] = wn[j] + bn[j]
        # n into hw's row (its r part is used), then copied: stored straight into y's row next to
        # the r and hn it reads, the loop did not vectorize (23 us against 3 for 20 x 128)
        xn, r_, z_, n_, h_ = (
            x[2 * hidden + j0 :],
            yr[hidden + j0 :],
            yr[2 * hidden + j0 :],
            yr[3 * hidden + j0 :],
            yr[j0:],
        )
        for j in range(u):
            a = r_[j] * hn[j]
            w[j] = _tanh(xn[j] + a)
        for j in range(u):
            n_[j] = w[j]
        for j in range(u):
            nn = n_[j]
            a = hp[j] - nn
            a = z_[j] * a
            h_[j] = nn + a


@njit(cache=True, error_model="numpy", boundscheck=False)
def gru_backward_cell(gy, y, h0, d, dhp, t, prev, after, one):
    """d[t] = [dr, dz, dn, dhn, dh * z] of step t and dhp = [dr, dz, dhn] (N, 3H), from gy[t] and
    d[after, :, 4H:] (-1: none); d[t, :, 4H:] holds dh meanwhile."""
    rows, hidden = h0.shape
    for n in range(rows):
        g_, yr, dr, pr = gy[t, n], y[t, n], d[t, n], dhp[n]
        hp = h0[n] if prev < 0 else y[prev, n]
        if after >= 0:
            nr = d[after, n]
            for j in range(hidden):
                dr[4 * hidden + j] = g_[j] + nr[4 * hidden + j]
        else:
            for j in range(hidden):
                dr[4 * hidden + j] = g_[j]
        for j in range(hidden):  # dz
            a = hp[j] - yr[3 * hidden + j]
            a = dr[4 * hidden + j] * a
            a = a + g_[2 * hidden + j]
            z = yr[2 * hidden + j]
            pr[hidden + j] = a * z * (one - z)
        for j in range(hidden):  # dn
            z = yr[2 * hidden + j]
            a = dr[4 * hidden + j] * (one - z)
            a = a + g_[3 * hidden + j]
            nn = yr[3 * hidden + j]
            b = nn * nn
            b = one - b
            dr[2 * hidden + j] = a * b
        for j in range(hidden):  # dhn
            a = dr[2 * hidden + j] * yr[hidden + j]
            pr[2 * hidden + j] = a + g_[4 * hidden + j]
        for j in range(hidden):  # dr
            a = dr[2 * hidden + j] * yr[4 * hidden + j]
            a = a + g_[hidden + j]
            r = yr[hidden + j]
            pr[j] = a * r * (one - r)
        for j in range(hidden):  # dh * z
            dr[4 * hidden + j] = dr[4 * hidden + j] * yr[2 * hidden + j]
        for j in range(hidden):
            dr[j] = pr[j]
        for j in range(hidden):
            dr[hidden + j] = pr[hidden + j]
        for j in range(hidden):
            dr[3 * hidden + j] = pr[2 * hidden + j]


# ------------------------------------------------------------------ Elman RNN (ops/recurrent.py)
# ``relu`` picks the nonlinearity (else tanh): an argument, not one closure per nonlinearity, so
# that Numba's disk cache tells the two apart and the loops below, which take it too, stay cached
# (a loop taking a cell function as an argument was compiled again in every process).
@njit(cache=True, error_model="numpy", boundscheck=False)
def rnn_forward_cell(xp, hw, y, t, prev, one, relu, j0, j1, base):
    """y[t] = act(xp[t] + hw) (hw = h_prev @ w_hh^T), for the units j0 .. j1 (-1: all), at hw's
    columns base + (j - j0)."""
    rows, hidden = hw.shape[0], y.shape[2]
    end = hidden if j1 < 0 else j1
    u = end - j0
    zero = one - one
    for n in range(rows):
        x, w, yr = xp[t, n, j0:], hw[n, base:], y[t, n, j0:]
        if relu:
            for j in range(u):
                yr[j] = kernel_lib.fmax(x[j] + w[j], zero)
        else:
            for j in range(u):
                yr[j] = _tanh(x[j] + w[j])


@njit(cache=True, error_model="numpy", boundscheck=False)
def rnn_backward_cell(gy, y, d, t, after, one, relu):
    """d[t, :, :H] = dpre of step t from gy[t] and d[after, :, H:] (-1: none)."""
    rows, hidden = y.shape[1], y.shape[2]
    zero = one - one
    for n in range(rows):
        g_, yr, dr = gy[t, n], y[t, n], d[t, n]
        if after >= 0:
            nr = d[after, n]
            for j in range(hidden):
                dr[j] = g_[j] + nr[hidden + j]
        else:
            for j in range(hidden):
                dr[j] = g_[j]
        if relu:
            for j in range(hidden):
                dr[j] = dr[j] if yr[j] > zero else zero
        else:
            for j in range(hidden):
                a = yr[j] * yr[j]
                a = one - a
                dr[j] = dr[j] * a


# ------------------------------------------------------------------ rows past their length
@njit(cache=True, error_model="numpy", boundscheck=False)
def hold_forward(y, t, prev, lengths, init):
    """``recurrent.hold_forward``: rows with t >= lengths copy their state (init's width) from the
    step before (init when ``prev`` is -1) and zero their other columns."""
    rows, width = init.shape
    for n in range(rows):
        if t >= lengths[n]:
            for j in range(width):
                y[t, n, j] = init[n, j] if prev < 0 else y[prev, n, j]
            for j in range(width, y.shape[2]):
                y[t, n, j] = 0


@njit(cache=True, error_model="numpy", boundscheck=False)
def hold_backward(gy, d, t, after, lengths, moves, zeros):
    """``recurrent.hold_backward`` (``moves`` a (k, 3) int64 array of its tuples)."""
    for n in range(d.shape[1]):
        if t >= lengths[n]:
            for m in range(moves.shape[0]):
                g0, d0 = moves[m, 0], moves[m, 1]
                for j in range(moves[m, 2]):
                    v = gy[t, n, g0 + j]
                    if after >= 0:
                        v = v + d[after, n, d0 + j]
                    d[t, n, d0 + j] = v
            for j in range(zeros):
                d[t, n, j] = 0


# ------------------------------------------------------------------ whole loops (ops/recurrent.py)
LSTM, GRU, RNN_TANH, RNN_RELU = 0, 1, 2, 3  # forward_loop's cells


# The loop of ``scan_forward`` in one native call: the same products (the OpenBLAS calls NumPy's
# matmul makes for them, ``native.matmul_call``: ``first`` for h0, ``later`` for the rows of y)
# and the same cells, so the same bits. Python's loop cost about 5 us a step (half of a step at
# batch 1). In ``recurrent.unit_groups``' groups, each group's products and cell (_group_step):
# one group after the other (forward_loop) or side by side on Numba's threads
# (forward_loop_parallel), the same bits.
@njit(cache=True, inline="always")
def _group_step(xp, h0, c0, b, wt, y, hw, t, prev, one, kind, first, later, width, cell, g, units, bstep):
    """Step t's products and cell for group g of ``units`` hidden units (``bstep``: the elements
    between two columns of wt, 1 for a row-major copy, H for the transposed view)."""
    span = hw.shape[1] * units // h0.shape[1]  # the group's columns of hw and wt
    row = y.shape[1] * y.shape[2]
    for s in range(g * span, (g + 1) * span, width):
        if prev < 0:
            native.product(h0, 0, wt, s * bstep, hw, s, kind, first)
        else:
            native.product(y, prev * row, wt, s * bstep, hw, s, kind, later)
    j0 = g * units
    if cell == GRU:
        gru_forward_cell(xp, hw, h0, b, y, t, prev, one, j0, j0 + units, g * span)
    elif cell == LSTM:
        lstm_forward_cell(xp, hw, c0, y, t, prev, one, j0, j0 + units, g * span)
    else:
        rnn_forward_cell(xp, hw, y, t, prev, one, cell == RNN_RELU, j0, j0 + units, g * span)


@njit(cache=True, error_model="numpy", boundscheck=False)
def forward_loop(
    xp, h0, c0, b, wt, y, hw, ts, prevs, one, kind, first, later, width, cell, lengths, init, groups, bstep
):
    """The forward of an LSTM (``cell`` LSTM; ``c0``), a GRU (GRU; ``b`` = b_hh) or an Elman RNN
    (RNN_TANH, RNN_RELU) in ``groups`` groups of units; the arrays a cell does not read are any
    of the right type. Rows past their ``lengths`` hold ``init``'s columns (:func:`hold_forward`)."""
    shortest = lengths.min()
    units = h0.shape[1] // groups
    for k in range(ts.size):
        t, prev = ts[k], prevs[k]
        for g in range(groups):
            _group_step(xp, h0, c0, b, wt, y, hw, t, prev, one, kind, first, later, width, cell, g, units, bstep)
        if t >= shortest:
            hold_forward(y, t, prev, lengths, init)


@njit(cache=True, error_model="numpy", boundscheck=False, parallel=True)
def forward_loop_parallel(
    xp, h0, c0, b, wt, y, hw, ts, prevs, one, kind, first, later, width, cell, lengths, init, groups, bstep
):
    """:func:`forward_loop` with each step's groups side by side on Numba's threads."""
    shortest = lengths.min()
    units = h0.shape[1] // groups
    for k in range(ts.size):
        t, prev = ts[k], prevs[k]
        for g in prange(groups):
            _group_step(xp, h0, c0, b, wt, y, hw, t, prev, one, kind, first, later, width, cell, g, units, bstep)
        if t >= shortest:
            hold_forward(y, t, prev, lengths, init)


@njit(cache=True, error_model="numpy", boundscheck=False)
def lstm_backward_loop(gy, y, c0, w_hh, d, dh, dc, mm, ts, prevs, one, kind, call, width, lengths, moves):
    """``recurrent.lstm_backward`` in one native call: per step the cell, the product of the
    step's dgates by w_hh into mm (``call``: NumPy's), copied into d[t, :, 5H:]."""
    rows, hidden = c0.shape
    row = y.shape[1] * y.shape[2]
    shortest = lengths.min()
    after = -1
    for k in range(ts.size - 1, -1, -1):
        t, prev = ts[k], prevs[k]
        lstm_backward_cell(gy, y, c0, d, t, prev, after, one, dh, dc, 0, hidden)
        _products(d, t * row, w_hh, mm, kind, call, width)
        for n in range(rows):
            for j in range(hidden):
                d[t, n, 5 * hidden + j] = mm[n, j]
        if t >= shortest:
            hold_backward(gy, d, t, after, lengths, moves, 4 * hidden)
        after = t


@njit(cache=True, error_model="numpy", boundscheck=False, parallel=True)
def lstm_backward_loop_parallel(
    gy, y, c0, w_hh, d, dh, dc, mm, ts, prevs, one, kind, call, width, lengths, moves, shares
):
    """:func:`lstm_backward_loop` on Numba's threads: per step the cell in ``shares`` ranges of
    units side by side (a unit's columns depend on its own only), then the product's column
    blocks side by side (the same calls), each copied into d[t, :, 5H:] by its thread."""
    rows, hidden = c0.shape
    row = y.shape[1] * y.shape[2]
    shortest = lengths.min()
    after = -1
    for k in range(ts.size - 1, -1, -1):
        t, prev = ts[k], prevs[k]
        for s in prange(shares):
            lstm_backward_cell(
                gy, y, c0, d, t, prev, after, one, dh, dc, s * hidden // shares, (s + 1) * hidden // shares
            )
        for b in prange(hidden // width):
            c = b * width
            native.product(d, t * row, w_hh, c, mm, c, kind, call)
            for n in range(rows):
                for j in range(c, c + width):
                    d[t, n, 5 * hidden + j] = mm[n, j]
        if t >= shortest:
            hold_backward(gy, d, t, after, lengths, moves, 4 * hidden)
        after = t


@njit(cache=True, error_model="numpy", boundscheck=False)
def gru_backward_loop(gy, y, h0, w_hh, d, dhp, mm, ts, prevs, one, kind, call, width, lengths, moves):
    """``recurrent.gru_backward`` in one native call: per step the cell, dhp @ w_hh into mm
    (``call``: NumPy's), added to d[t, :, 4H:]."""
    rows, hidden = h0.shape
    shortest = lengths.min()
    after = -1
    for k in range(ts.size - 1, -1, -1):
        t, prev = ts[k], prevs[k]
        gru_backward_cell(gy, y, h0, d, dhp, t, prev, after, one)
        _products(dhp, 0, w_hh, mm, kind, call, width)
        for n in range(rows):
            for j in range(hidden):
                d[t, n, 4 * hidden + j] = d[t, n, 4 * hidden + j] + mm[n, j]
        if t >= shortest:
            hold_backward(gy, d, t, after, lengths, moves, 4 * hidden)
        after = t


@njit(cache=True, error_model="numpy", boundscheck=False)
def rnn_backward_loop(gy, y, w_hh, d, mm, ts, one, kind, call, width, relu, lengths, moves):
    """``recurrent.rnn_backward`` in one native call: per step the cell, dpre @ w_hh into mm
    (``call``: NumPy's), copied into d[t, :, H:]."""
    rows, hidden = y.shape[1], y.shape[2]
    row = d.shape[1] * d.shape[2]
    shortest = lengths.min()
    after = -1
    for k in range(ts.size - 1, -1, -1):
        t = ts[k]
        rnn_backward_cell(gy, y, d, t, after, one, relu)
        _products(d, t * row, w_hh, mm, kind, call, width)
        for n in range(rows):
            for j in range(hidden):
                d[t, n, hidden + j] = mm[n, j]
        if t >= shortest:
            hold_backward(gy, d, t, after, lengths, moves, hidden)
        after = t


def _all_units(cell, *tail):
    """``cell`` as the Python loops of ops/recurrent.py call it (without the range of units:
    ``tail``, all of them). The kernels take the range as required arguments: called with
    defaults left out, Numba compiles a specialization of the omitted values that did not
    vectorize (an LSTM cell of 20 x 128 took 49 us against 6.7 with the values passed)."""
    return lambda *args: cell(*args, *tail)


def _native_call(a, b, out):
    """(kind, header) of NumPy's ``a @ b`` into ``out`` when the loops can make it (a gemm, or a
    gemv over b), else None."""
    call = native.matmul_call(a, b, out)
    if call is None or (call[0], call[1]) not in (("gemm", "ab"), ("gemv", "ba"), ("own", "ab")):
        return None
    return {"gemm": 0, "gemv": 1, "own": 2}[call[0]], call[2]


def _orders(steps: int, reverse: bool) -> tuple:
    order = recurrent.step_order(steps, reverse)
    return np.array([t for t, _ in order], dtype=np.int64), np.array([p for _, p in order], dtype=np.int64)


def scratch_bytes(op: str, shapes: list, out_shape: tuple, itemsize: int) -> int:
    """Bytes of the arrays one call of ``op``'s loop makes besides its output (``shapes``: the
    op's input shapes, the optional int64 lengths last; float arrays of ``itemsize`` bytes,
    index arrays of 8): for a forward, the product's rows ``hw`` (N, G*H), the row-major copy
    of w_hh^T (``recurrent.recurrent_weight``) and, when rows have lengths, an LSTM's initial
    state (N, 2H) (its step order and full lengths are made once per shapes: _forward_plan);
    for a backward, the step order and lengths and the per-step gradients (LSTM dh, dc and the
    product mm, N x H each; GRU dh_prev (N, 3H) and mm; RNN mm). The plan reports them in its
    memory (``PlanMemory.scratch_bytes``)."""
    steps, rows = out_shape[0], out_shape[1]
    if op.endswith("_backward"):
        hidden = shapes[2 if op == "rnn_scan_backward" else 3][1]  # w_hh (G*H, H)
        per_row = {"lstm_scan_backward": 3 * hidden, "gru_scan_backward": 4 * hidden}.get(op, hidden)
        return (2 * steps + rows) * 8 + rows * per_row * itemsize
    w_hh = shapes[3] if op == "lstm_scan" else shapes[2]
    hidden = w_hh[1]
    floats = rows * w_hh[0] + (w_hh[0] * hidden if rows >= recurrent.COPY_MIN_ROWS else 0)
    if op == "lstm_scan" and len(shapes) > 4:  # lengths given: rows past theirs hold this state
        floats += rows * 2 * hidden
    return floats * itemsize


def _moves(moves: tuple) -> np.ndarray:
    return np.array(moves, dtype=np.int64).reshape(-1, 3)


def lstm_backward(gy, y, c0, w_hh, d, cell, reverse: bool = False, lengths=None, team: bool = False) -> None:
    """``recurrent.lstm_backward`` in one native call when NumPy's product is one it can make; on
    Numba's threads (:func:`lstm_backward_loop_parallel`) where ``team`` (the plan's flag) and
    ``lowering/cpu/load.on_team`` allow and the forward of this shape runs in groups
    (``recurrent.unit_groups``: the work is large enough)."""
    hidden = c0.shape[1]
    dh, dc, mm = np.empty_like(c0), np.empty_like(c0), np.empty_like(c0)
    width = recurrent.column_block(mm.shape[0], hidden, 4 * hidden)
    call = _native_call(d[0, :, : 4 * hidden], w_hh[:, :width], mm[:, :width])
    if call is None:
        recurrent.lstm_backward(gy, y, c0, w_hh, d, _all_units(cell, 0, -1), reverse, lengths)
        return
    ts, prevs = _orders(y.shape[0], reverse)
    lengths, moves = recurrent.full_lengths(lengths, *y.shape[:2]), _moves(recurrent.lstm_moves(hidden))
    shares = min(numba.get_num_threads(), hidden // 16)
    parallel = shares > 1 and recurrent.unit_groups(*c0.shape, 4) > 1 and on_team(team)
    with one_thread():
        if parallel:
            args = (gy, y, c0, w_hh, d, dh, dc, mm, ts, prevs, y.dtype.type(1), *call, width, lengths, moves, shares)
            lstm_backward_loop_parallel(*args)
        else:
            lstm_backward_loop(gy, y, c0, w_hh, d, dh, dc, mm, ts, prevs, y.dtype.type(1), *call, width, lengths, moves)


def gru_backward(gy, y, h0, w_hh, d, cell, reverse: bool = False, lengths=None) -> None:
    """``recurrent.gru_backward`` in one native call when NumPy's product is one it can make."""
    dhp = np.empty((h0.shape[0], w_hh.shape[0]), dtype=y.dtype)
    mm = np.empty_like(h0)
    width = recurrent.column_block(mm.shape[0], mm.shape[1], dhp.shape[1])
    call = _native_call(dhp, w_hh[:, :width], mm[:, :width])
    if call is None:
        recurrent.gru_backward(gy, y, h0, w_hh, d, cell, reverse, lengths)
        return
    ts, prevs = _orders(y.shape[0], reverse)
    hidden = h0.shape[1]
    lengths, moves = recurrent.full_lengths(lengths, *y.shape[:2]), _moves((0, 4 * hidden, hidden))
    with one_thread():
        gru_backward_loop(gy, y, h0, w_hh, d, dhp, mm, ts, prevs, y.dtype.type(1), *call, width, lengths, moves)


# What a forward loop takes besides the op's arrays, per shapes (a plan of symbolic sizes runs
# one step at many): made once, not at every call (about 45 us a call of a layer at batch 1,
# a tenth of its time).
_FORWARD_PLANS: dict = {}
MAX_FORWARD_PLANS = 64


def _forward_plan(h0, w_hh, y, reverse: bool):
    """``(groups, bstep, width, kind, first, later, ts, prevs, full)`` for the native forward
    loops, made as ``recurrent.scan_forward`` makes its products (``recurrent.unit_groups``'
    groups of ``recurrent.column_block``'s blocks; ``bstep``: the elements between two columns
    of wt; ``full``: the lengths of rows that all run every step, read only), or None when
    NumPy's products are not one gemm or one gemv over wt each (the Python loop runs then).
    Kept per shapes and dtype."""
    key = (h0.shape, w_hh.shape, y.shape, y.dtype.str, reverse)
    made = _FORWARD_PLANS.get(key, False)
    if made is not False:
        return made
    rows, hidden = h0.shape
    groups = recurrent.unit_groups(rows, hidden, w_hh.shape[0] // hidden)
    wt = recurrent.recurrent_weight(np.empty_like(w_hh), rows, groups)
    hw = np.empty((rows, w_hh.shape[0]), dtype=y.dtype)
    width = recurrent.column_block(rows, w_hh.shape[0] // groups, hidden)
    first = _native_call(h0, wt[:, :width], hw[:, :width])
    later = _native_call(y[0, :, :hidden], wt[:, :width], hw[:, :width])
    made = None
    if first is not None and later is not None and first[0] == later[0]:
        bstep = wt.strides[1] // wt.itemsize
        full = recurrent.full_lengths(None, *y.shape[:2])
        made = (groups, bstep, width, first[0], first[1], later[1], *_orders(y.shape[0], reverse), full)
    if len(_FORWARD_PLANS) >= MAX_FORWARD_PLANS:
        _FORWARD_PLANS.clear()
    _FORWARD_PLANS[key] = made
    return made


def _native_forward(xp, h0, c0, b, w_hh, y, reverse: bool, cell: int, lengths, team: bool) -> bool:
    """Run :func:`forward_loop` (an LSTM's ``c0``, a GRU's ``b``), or :func:`forward_loop_parallel`
    where the step has groups and runs on the team (``team``: the plan's flag, lowering/cpu/load.on_team);
    False when there is no :func:`_forward_plan` (the caller runs the Python loop)."""
    made = _forward_plan(h0, w_hh, y, reverse)
    if made is None:
        return False
    groups, bstep, width, kind, first, later, ts, prevs, full = made
    wt = recurrent.recurrent_weight(w_hh, h0.shape[0], groups)
    hw = np.empty((h0.shape[0], w_hh.shape[0]), dtype=y.dtype)
    if lengths is None:  # every row runs every step: no row holds a state (init is never read)
        lengths, init = full, h0
    else:
        lengths = recurrent.full_lengths(lengths, *y.shape[:2])
        init = recurrent.lstm_init(h0, c0) if cell == LSTM else h0
    loop = forward_loop_parallel if groups > 1 and on_team(team) else forward_loop
    with one_thread():
        loop(
            xp,
            h0,
            c0,
            b,
            wt,
            y,
            hw,
            ts,
            prevs,
            y.dtype.type(1),
            kind,
            first,
            later,
            width,
            cell,
            lengths,
            init,
            groups,
            bstep,
        )
    return True


def lstm_forward(xp, h0, c0, w_hh, y, cell, reverse: bool = False, lengths=None, team: bool = False) -> None:
    """``recurrent.lstm_forward`` in one native call (``cell`` is this module's, called inside;
    ``team``: the plan runs steps on Numba's threads, :func:`_native_forward`)."""
    if not _native_forward(xp, h0, c0, c0[0], w_hh, y, reverse, LSTM, lengths, team):
        recurrent.lstm_forward(xp, h0, c0, w_hh, y, _all_units(cell, 0, -1, 0), reverse, lengths)


def gru_forward(xp, h0, w_hh, b_hh, y, cell, reverse: bool = False, lengths=None, team: bool = False) -> None:
    """``recurrent.gru_forward`` in one native call (``cell`` is this module's, called inside;
    ``team`` as :func:`lstm_forward`'s)."""
    if not _native_forward(xp, h0, h0, b_hh, w_hh, y, reverse, GRU, lengths, team):
        recurrent.gru_forward(xp, h0, w_hh, b_hh, y, _all_units(cell, 0, -1, 0), reverse, lengths)


def rnn_forward(xp, h0, w_hh, y, relu: bool, reverse: bool = False, lengths=None, team: bool = False) -> None:
    """``recurrent.rnn_forward`` in one native call (``relu``: the nonlinearity, else tanh;
    ``team`` as :func:`lstm_forward`'s)."""
    if not _native_forward(xp, h0, h0, h0[0], w_hh, y, reverse, RNN_RELU if relu else RNN_TANH, lengths, team):
        cell = _all_units(rnn_forward_cell, relu, 0, -1, 0)
        recurrent.rnn_forward(xp, h0, w_hh, y, cell, reverse, lengths)


def rnn_backward(gy, y, w_hh, d, relu: bool, reverse: bool = False, lengths=None) -> None:
    """``recurrent.rnn_backward`` in one native call when NumPy's product is one it can make."""
    hidden = y.shape[2]
    mm = np.empty((y.shape[1], hidden), dtype=y.dtype)
    width = recurrent.column_block(mm.shape[0], hidden, hidden)
    call = _native_call(d[0, :, :hidden], w_hh[:, :width], mm[:, :width])
    if call is None:
        cell = lambda gy, y, d, t, after, one: rnn_backward_cell(gy, y, d, t, after, one, relu)  # noqa: E731
        recurrent.rnn_backward(gy, y, w_hh, d, cell, reverse, lengths)
        return
    ts, _ = _orders(y.shape[0], reverse)
    lengths, moves = recurrent.full_lengths(lengths, *y.shape[:2]), _moves((0, hidden, hidden))
    with one_thread():
        rnn_backward_loop(gy, y, w_hh, d, mm, ts, y.dtype.type(1), *call, width, relu, lengths, moves)


# The loops inline kernel_lib's approximations and native.product: their cache entries follow them.
stamp_with(inlined_sources_hash(), *[f for f in list(globals().values()) if isinstance(f, CPUDispatcher)])
