"""Transformer layers (Vaswani et al. 2017) with PyTorch's arguments, structure and parameter names.

``TransformerEncoderLayer`` / ``TransformerDecoderLayer`` are post-norm (``norm_first=False``, the
paper's) or pre-norm blocks of ``nn.MultiheadAttention``, a feed-forward network (``linear1``,
``activation``, ``dropout``, ``linear2``) and ``LayerNorm``s, with PyTorch's submodule names, so
their state_dict keys (``self_attn.in_proj_weight``, ``linear1.weight``, ``norm1.weight``, ...)
load both ways. ``TransformerEncoder`` / ``TransformerDecoder`` stack deep copies of one layer
(``layers.0``, ``layers.1``, ...: every copy starts from the same weights, as in PyTorch) with an
optional final ``norm``; ``Transformer`` joins them and re-initializes every matrix with
xavier_uniform_. Masks follow MultiheadAttention's convention: a bool mask is True where
attention is *not* allowed, a float mask is added to the scores (``generate_square_subsequent_mask``
makes the float causal one).
"""

from __future__ import annotations

import copy
import math

from lazyvic import functional as F
from lazyvic.creation import full, triu
from lazyvic.errors import ShapeError
from lazyvic.nn import init
from lazyvic.nn.attention import MultiheadAttention
from lazyvic.nn.layers import Dropout, Linear, ModuleList
from lazyvic.nn.module import Module
from lazyvic.nn.normalization import LayerNorm
from lazyvic.tensor import Tensor


def _activation(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise ValueError(f"activation should be relu/gelu, not {activation}")
    if not callable(activation):
        raise ValueError(f"activation should be 'relu', 'gelu' or a callable, got {activation!r}")
    return activation


def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
    """(sz, sz) float mask: ``-inf`` above the diagonal (position i may not attend to j > i), 0 elsewhere."""
    return triu(full((sz, sz), -math.inf, dtype=dtype, device=device), diagonal=1)


def _clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: the feed-forward block and the norms."""

    def _feed_forward(self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, norms, factory):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    def _ff_block(self, x: Tensor, dropout: Module) -> Tensor:
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal) -> Tensor:
        x = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False, is_causal=is_causal
        )[0]
        return self.dropout1(x)

    def _check(self, name: str, x: Tensor, what: str) -> None:
        if x.ndim not in (2, 3) or x.shape[-1] != self.self_attn.embed_dim:
            raise ShapeError(
                f"{name}: expected {what} of shape (S, N, {self.self_attn.embed_dim}) (batch_first: "
                f"(N, S, {self.self_attn.embed_dim})) or unbatched (S, {self.self_attn.embed_dim}), got {x.shape}"
            )


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention and a feed-forward network, as ``torch.nn.TransformerEncoderLayer``.

    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``: src (S, N, E),
    (N, S, E) with ``batch_first``, or (S, E); src_mask (S, S) or (N * nhead, S, S);
    src_key_padding_mask (N, S). ``activation``: ``'relu'``, ``'gelu'`` or a callable.
    Raises ShapeError for inputs or masks of the wrong shape.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation=F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self.norm_first = norm_first
        self._feed_forward(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, 2, factory)

    def forward(self, src: Tensor, src_mask=None, src_key_padding_mask=None, is_causal: bool = False) -> Tensor:
        self._check("TransformerEncoderLayer", src, "src")
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention over the encoder's ``memory`` and a feed-forward network, as
    ``torch.nn.TransformerDecoderLayer``.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``: tgt (T, N, E),
    memory (S, N, E) (batch first when ``batch_first``); tgt_mask (T, T), memory_mask (T, S),
    key padding masks (N, T) and (N, S). Raises ShapeError for inputs or masks of the wrong shape.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation=F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **factory
        )
        self.norm_first = norm_first
        self._feed_forward(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, 3, factory)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal) -> Tensor:
        x = self.multihead_attn(
            x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal, need_weights=False
        )[0]
        return self.dropout2(x)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        self._check("TransformerDecoderLayer", tgt, "tgt")
        self._check("TransformerDecoderLayer", memory, "memory")
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x, self.dropout3))


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` (``layers.0`` ...) and an optional final
    ``norm``, as ``torch.nn.TransformerEncoder``. ``forward(src, mask=None,
    src_key_padding_mask=None, is_causal=None)``; ``enable_nested_tensor`` and ``mask_check`` are
    accepted (lazyvic has no nested tensors)."""

    def __init__(
        self,
        encoder_layer: Module,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check

    def forward(self, src: Tensor, mask=None, src_key_padding_mask=None, is_causal=None) -> Tensor:
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(output) if self.norm is not None else output


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` and an optional final ``norm``, as
    ``torch.nn.TransformerDecoder``."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        output = tgt
        for layer in self.layers:
            output = layer(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return self.norm(output) if self.norm is not None else output


class Transformer(Module):
    """Encoder-decoder transformer, as ``torch.nn.Transformer``: ``encoder`` (a TransformerEncoder
    with a final LayerNorm) and ``decoder`` (likewise), or ``custom_encoder``/``custom_decoder``;
    every parameter with more than one axis is re-drawn with xavier_uniform_.

    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None,
    tgt_is_causal=None, memory_is_causal=False)``: src (S, N, E), tgt (T, N, E) (batch first with
    ``batch_first``) -> (T, N, E). Raises ShapeError when the batch sizes of src and tgt differ or
    their feature size is not ``d_model``.
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation=F.relu,
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(*args, **factory)
            self.encoder = TransformerEncoder(
                layer, num_encoder_layers, LayerNorm(d_model, layer_norm_eps, bias=bias, **factory)
            )
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(*args, **factory)
            self.decoder = TransformerDecoder(
                layer, num_decoder_layers, LayerNorm(d_model, layer_norm_eps, bias=bias, **factory)
            )
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[batch] != tgt.shape[batch]):
            raise ShapeError(f"Transformer: the batch number of src {src.shape} and tgt {tgt.shape} must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(
                f"Transformer: the feature number of src {src.shape} and tgt {tgt.shape} must be equal to "
                f"d_model={self.d_model}"
            )
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """(sz, sz) float mask, ``-inf`` above the diagonal and 0 elsewhere (PyTorch's causal mask)."""
        return generate_square_subsequent_mask(sz, device, dtype)
