"""Recurrent layers: RNN, LSTM, GRU and their cells, with PyTorch's arguments, shapes and names.

The math is in :mod:`lazyvic.functional.recurrent` (one function per cell type that steps a
whole sequence, so a dedicated kernel can replace it in one place); these modules hold the
parameters and stack the layers and directions. Per layer and direction, one input projection
for all time steps, then (LSTM and GRU, on the CPU) the recurrence as one primitive whose plan
step loops over the time steps (``ops/recurrent.py``); an Elman RNN, a packed sequence, a CUDA
tensor or an ONNX export unrolls about a dozen small nodes per time step instead.

Parameters as PyTorch (so state_dicts load both ways): for layer k and direction suffix ``''`` or
``'_reverse'``, ``weight_ih_l{k}{suffix}`` (G*H, I_k), ``weight_hh_l{k}{suffix}`` (G*H, H),
``bias_ih_l{k}{suffix}`` and ``bias_hh_l{k}{suffix}`` (G*H,), with G = 1 (RNN), 4 (LSTM, gates
i, f, g, o) or 3 (GRU, gates r, z, n) and I_k the input size of layer 0, else H * directions;
every one drawn from U(-1/sqrt(H), 1/sqrt(H)).
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from lazyvic import functional as F
from lazyvic.creation import empty, zeros
from lazyvic.errors import DTypeError, ShapeError, UnsupportedOpError
from lazyvic.functional import recurrent
from lazyvic.indexing import cat, stack
from lazyvic.nn import init
from lazyvic.nn.module import Module, Parameter
from lazyvic.nn.utils.rnn import lengths_of
from lazyvic.tensor import Tensor

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _is_packed(input) -> bool:
    """A ``nn.utils.rnn.PackedSequence`` (recognized by its fields, so this module needs no import of it)."""
    return all(hasattr(input, f) for f in ("data", "batch_sizes", "sorted_indices", "unsorted_indices"))


def _check_input(name: str, input) -> None:
    if not isinstance(input, Tensor):
        raise DTypeError(f"{name}: expected a lazyvic.Tensor input, got {type(input).__name__}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"{name}: expected a floating-point input, got {input.dtype.name}")


class RNNBase(Module):
    """The layers and directions of a recurrent network; ``mode`` is ``'RNN_TANH'``, ``'RNN_RELU'``,
    ``'LSTM'`` or ``'GRU'`` (use :class:`RNN`, :class:`LSTM` or :class:`GRU`).

    ``forward(input, hx=None)``: input (T, N, I), (N, T, I) with ``batch_first``, or unbatched
    (T, I); hx (num_layers * D, N, H) or (num_layers * D, H) (for LSTM a pair ``(h_0, c_0)``),
    zeros when None. Returns ``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``) with output
    (T, N, D * H) (the directions concatenated, forward first) and h_n like hx. In training a
    ``dropout`` > 0 drops the outputs of every layer but the last. A ``nn.utils.rnn.PackedSequence``
    input gives a PackedSequence output, each sequence stepped over its own length (its final
    states are those of its last step), as in PyTorch.

    Raises ShapeError for an input that is not 2-D or 3-D, has no time steps or has the wrong
    feature size (or a
    PackedSequence whose data and batch_sizes disagree), or a hidden state of the wrong shape;
    DTypeError for a non-floating input; UnsupportedOpError for ``proj_size`` > 0.
    """

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        name = type(self).__name__
        if mode not in _GATES:
            raise ValueError(f"{name}: unknown mode {mode!r} (expected one of {sorted(_GATES)})")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1], got {dropout!r}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                f"dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                stacklevel=2,
            )
        for what, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}: {what} must be an integer greater than zero, got {value!r}")
        if proj_size:
            if mode != "LSTM":
                raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN or GRU")
            raise UnsupportedOpError(f"{name}: proj_size={proj_size} (LSTM with projections) is not supported")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                for kind, shape in shapes:
                    setattr(self, kind + suffix, Parameter(empty(*shape, dtype=dtype, device=device)))
                    self._flat_weights_names.append(kind + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """PyTorch packs the weights for cuDNN here; lazyvic has nothing to pack."""

    @property
    def all_weights(self) -> list:
        per = 4 if self.bias else 2
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i : i + per]] for i in range(0, len(names), per)]

    def _layer_weights(self, layer: int, direction: int) -> tuple:
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = self._parameters.get
        return get("weight_ih" + suffix), get("weight_hh" + suffix), get("bias_ih" + suffix), get("bias_hh" + suffix)

    def _states(self, name: str, hx, batch: int, unbatched: bool, x: Tensor) -> list:
        """The initial states as (num_layers * D, N, H) tensors: [h0] or [h0, c0]."""
        count = 2 if self.mode == "LSTM" else 1
        expected = (self.num_layers * (2 if self.bidirectional else 1), batch, self.hidden_size)
        if hx is None:
            return [zeros(*expected, dtype=x.dtype, device=x.device) for _ in range(count)]
        if count == 2:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ShapeError(f"{name}: hx must be a pair (h_0, c_0), got {type(hx).__name__}")
            states = list(hx)
        else:
            states = [hx]
        out = []
        for what, s in zip(("h_0", "c_0"), states):
            want = expected[::2] if unbatched else expected
            if not isinstance(s, Tensor) or s.shape != want:
                got = s.shape if isinstance(s, Tensor) else type(s).__name__
                raise ShapeError(f"{name}: expected {what} of shape {want}, got {got}")
            out.append(s.unsqueeze(1) if unbatched else s)
        return out

    def forward(self, input: Tensor, hx=None):
        name = type(self).__name__
        if _is_packed(input):
            return self._forward_packed(name, input, hx)
        _check_input(name, input)
        if input.ndim not in (2, 3):
            raise ShapeError(f"{name}: expected input to be 2-D (T, I) or 3-D (T, N, I), got shape {input.shape}")
        self._check_features(name, input)
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if x.shape[0] == 0:  # (PyTorch: "Expected sequence length to be larger than 0 in RNN")
            raise ShapeError(f"{name}: expected a sequence length above 0, got input of shape {input.shape}")
        states = self._states(name, hx, x.shape[1], unbatched, x)
        x, last = self._layers(x, states, None)
        output = x.squeeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        if unbatched:
            last = [s.squeeze(1) for s in last]
        return output, (tuple(last) if self.mode == "LSTM" else last[0])

    def _check_features(self, name: str, input: Tensor) -> None:
        if input.shape[-1] != self.input_size:
            raise ShapeError(
                f"{name}: input.size(-1) must be equal to input_size: expected {self.input_size}, got input {input.shape}"
            )

    def _layers(self, x: Tensor, states: list, lengths) -> tuple:
        """Every layer and direction over x (T, N, I): the last layer's outputs (T, N, D*H) and the
        final states, each (num_layers * D, N, H)."""
        directions = 2 if self.bidirectional else 1
        finals = [[] for _ in states]
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                i = layer * directions + direction
                weights = self._layer_weights(layer, direction)
                result = self._run_layer(x, [s[i] for s in states], weights, direction == 1, lengths)
                outputs.append(result[0])
                for k, last in enumerate(result[1:]):
                    finals[k].append(last)
            x = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, [stack(f, 0) for f in finals]

    def _forward_packed(self, name: str, packed, hx):
        """A PackedSequence: unpacked to (T, B, I) (B the longest-first batch), stepped with the
        sequences that have ended (or, backwards, not begun) keeping their state, and packed again;
        states in and out are in the original batch order (``sorted_indices``), as in PyTorch."""
        data, sorted_indices, unsorted_indices = packed.data, packed.sorted_indices, packed.unsorted_indices
        _check_input(name, data)
        sizes = packed.batch_sizes
        sizes = np.asarray(sizes.numpy() if isinstance(sizes, Tensor) else sizes, dtype=np.int64)
        if data.ndim != 2 or sizes.ndim != 1 or not sizes.size or data.shape[0] != int(sizes.sum()):
            raise ShapeError(
                f"{name}: expected a PackedSequence with data (sum of lengths, I) and batch_sizes (T,), got data "
                f"{data.shape} and batch_sizes {tuple(sizes.shape)} summing to {int(sizes.sum())}"
            )
        self._check_features(name, data)
        steps, batch = len(sizes), int(sizes[0])
        # packed row r sits at padded row pos[r] of (T * B); padded rows past a sequence's end read a zero row
        pos = np.concatenate([t * batch + np.arange(n) for t, n in enumerate(sizes)])
        gather = np.full(steps * batch, data.shape[0], dtype=np.int64)
        gather[pos] = np.arange(data.shape[0])
        device = data.device
        padded = cat([data, data.new_zeros(1, data.shape[1])], 0)
        x = padded.index_select(0, Tensor(gather).to(device)).reshape(steps, batch, data.shape[1])
        lengths = Tensor(lengths_of(sizes)).to(device)  # of the longest-first batch's rows
        states = self._states(name, hx, batch, False, x)
        if hx is not None and sorted_indices is not None:
            states = [s.index_select(1, sorted_indices) for s in states]
        x, last = self._layers(x, states, lengths)
        out = x.reshape(steps * batch, x.shape[2]).index_select(0, Tensor(pos).to(device))
        if unsorted_indices is not None:
            last = [s.index_select(1, unsorted_indices) for s in last]
        output = type(packed)(out, packed.batch_sizes, sorted_indices, unsorted_indices)
        return output, (tuple(last) if self.mode == "LSTM" else last[0])

    def _run_layer(self, x: Tensor, states: list, weights: tuple, reverse: bool, lengths) -> tuple:
        w_ih, w_hh, b_ih, b_hh = weights
        if self.mode == "LSTM":
            return recurrent.lstm_layer(x, states[0], states[1], w_ih, w_hh, b_ih, b_hh, reverse, lengths)
        if self.mode == "GRU":
            return recurrent.gru_layer(x, states[0], w_ih, w_hh, b_ih, b_hh, reverse, lengths)
        nonlinearity = "tanh" if self.mode == "RNN_TANH" else "relu"
        return recurrent.rnn_layer(x, states[0], w_ih, w_hh, b_ih, b_hh, reverse, nonlinearity, lengths)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU with
    ``nonlinearity='relu'``), as ``torch.nn.RNN``; see :class:`RNNBase` for shapes and errors."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}; select from 'tanh' or 'relu'")
        super().__init__(
            "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU",
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype,
        )  # fmt: skip
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory (Hochreiter & Schmidhuber 1997), as ``torch.nn.LSTM``:
    ``c_t = f * c_{t-1} + i * g``, ``h_t = o * tanh(c_t)`` with gates i, f, o (sigmoid) and g (tanh)
    of ``x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh``. ``proj_size`` > 0 raises UnsupportedOpError;
    see :class:`RNNBase` for shapes and errors."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size,
            device, dtype,
        )  # fmt: skip


class GRU(RNNBase):
    """Gated recurrent unit (Cho et al. 2014), as ``torch.nn.GRU``: ``r, z = sigmoid(...)``,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h_t = (1 - z) * n + z * h_{t-1}``; see
    :class:`RNNBase` for shapes and errors."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__(
            "GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype
        )


# ================================================================= cells
class RNNCellBase(Module):
    """One recurrent step; parameters ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H), ``bias_ih`` and
    ``bias_hh`` (G*H,), all U(-1/sqrt(H), 1/sqrt(H)) (PyTorch's names and initialization).

    ``forward(input, hx=None)``: input (N, I) or (I,); hx (N, H) or (H,) (LSTMCell: a pair),
    zeros when None. Raises ShapeError for other shapes, DTypeError for a non-floating input."""

    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = self._gates * hidden_size
        self.weight_ih = Parameter(empty(g, input_size, dtype=dtype, device=device))
        self.weight_hh = Parameter(empty(g, hidden_size, dtype=dtype, device=device))
        if bias:
            self.bias_ih = Parameter(empty(g, dtype=dtype, device=device))
            self.bias_hh = Parameter(empty(g, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _prepare(self, input: Tensor, hx, count: int) -> tuple:
        """(input (N, I), states [(N, H)...], unbatched) after checking the shapes."""
        name = type(self).__name__
        _check_input(name, input)
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ShapeError(
                f"{name}: expected input (N, {self.input_size}) or ({self.input_size},), got {input.shape}"
            )
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        want = (x.shape[0], self.hidden_size)
        if hx is None:
            return x, [zeros(*want, dtype=x.dtype, device=x.device) for _ in range(count)], unbatched
        states = list(hx) if count == 2 else [hx]
        if len(states) != count:
            raise ShapeError(f"{name}: hx must be a pair (h, c), got {len(states)} tensors")
        for s in states:
            expect = want[1:] if unbatched else want
            if not isinstance(s, Tensor) or s.shape != expect:
                got = s.shape if isinstance(s, Tensor) else type(s).__name__
                raise ShapeError(f"{name}: expected a hidden state of shape {expect}, got {got}")
        return x, [s.unsqueeze(0) if unbatched else s for s in states], unbatched

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(RNNCellBase):
    """One Elman step, ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or ReLU), as ``torch.nn.RNNCell``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh", device=None, dtype=None
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: unknown nonlinearity {nonlinearity!r}; select from 'tanh' or 'relu'")
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx=None) -> Tensor:
        x, (h,), unbatched = self._prepare(input, hx, 1)
        cell = recurrent.rnn_tanh_cell if self.nonlinearity == "tanh" else recurrent.rnn_relu_cell
        h = cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step, as ``torch.nn.LSTMCell``; returns ``(h', c')``."""

    _gates = 4

    def forward(self, input: Tensor, hx=None) -> tuple:
        x, (h, c), unbatched = self._prepare(input, hx, 2)
        h, c = recurrent.lstm_cell(x, (h, c), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """One GRU step, as ``torch.nn.GRUCell``; returns ``h'``."""

    _gates = 3

    def forward(self, input: Tensor, hx=None) -> Tensor:
        x, (h,), unbatched = self._prepare(input, hx, 1)
        h = recurrent.gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return h.squeeze(0) if unbatched else h
