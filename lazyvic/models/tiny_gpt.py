"""TinyGPT: a character-level decoder-only transformer (GPT-2 layout, pre-norm blocks).

The architecture and parameter names follow GPT-2 (Radford et al. 2019) as laid
out in nanoGPT (``transformer.wte``, ``transformer.h.0.attn.c_attn``, ...), so
checkpoints map onto it by name; unlike nanoGPT the output head is not tied to
the token embedding (every parameter has exactly one state_dict key).
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import autograd, nn
from lazyvic import functional as F
from lazyvic.creation import arange
from lazyvic.errors import ShapeError
from lazyvic.nn import init
from lazyvic.random import default_generator
from lazyvic.tensor import Tensor


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention: one fused q/k/v projection ``c_attn`` (C -> 3C),
    scaled dot-product attention with the causal mask, output projection ``c_proj``.
    x (B, T, C) -> (B, T, C)."""

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"CausalSelfAttention: d_model {d_model} is not divisible by n_head {n_head}")
        self.n_head, self.dropout = n_head, dropout
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, kv_cache: F.KVCache | None = None, layer: int = 0) -> Tensor:
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True, kv_cache=kv_cache, layer=layer
        )
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """C -> 4C -> GELU (exact) -> C, then dropout."""

    def __init__(self, d_model: int, dropout: float = 0.0):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x: Tensor, kv_cache: F.KVCache | None = None, layer: int = 0) -> Tensor:
        x = x + self.attn(self.ln_1(x), kv_cache, layer)
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """A GPT over ``vocab_size`` tokens with a context of ``block_size`` positions.

    ``forward(idx, targets=None)``: idx int64 (B, T) with T <= block_size -> logits
    float32 (B, T, vocab_size); with ``targets`` (B, T) int64 it returns
    ``(logits, loss)``, the mean cross-entropy over all positions whose target is
    not ``ignore_index`` (-100, PyTorch's default).

    Initialization as GPT-2: weights N(0, 0.02), biases zero, and the residual
    projections (``c_proj``) N(0, 0.02 / sqrt(2 * n_layer)). ``config`` holds the
    constructor arguments (saved with the model by ``lazyvic.save``).

    Raises ShapeError for an input longer than ``block_size`` or not 2-D.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        n_layer: int = 2,
        n_head: int = 4,
        block_size: int = 64,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.config = dict(
            vocab_size=vocab_size,
            d_model=d_model,
            n_layer=n_layer,
            n_head=n_head,
            block_size=block_size,
            dropout=dropout,
        )
        self.block_size = block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, d_model),
                wpe=nn.Embedding(block_size, d_model),
                drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block(d_model, n_head, dropout) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(d_model),
            )
        )
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif name.endswith(".weight") and ".ln_" not in name:
                init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias") and ".ln_" not in name:
                init.zeros_(p)
        self._positions = {}

    def _pos(self, T: int, device: str = "cpu") -> Tensor:
        # One realized index per length and device: every step reads the same input (one plan).
        p = self._positions.get((T, device))
        if p is None:
            p = self._positions[(T, device)] = arange(T, device=device)
        return p

    def forward(self, idx: Tensor, targets: Tensor | None = None, kv_cache: F.KVCache | None = None):
        """Logits (B, T, vocab) of the tokens ``idx`` (B, T); with ``targets``, ``(logits, loss)``.

        ``kv_cache`` (:class:`lazyvic.nn.KVCache`): ``idx`` are the next tokens after those the
        cache has seen (positions ``past .. past + T - 1``); their keys and values are appended
        and only their logits are computed — autoregressive decoding, one token per call.

        Raises ShapeError for ids that are not (B, T) or positions past ``block_size``."""
        if idx.ndim != 2:
            raise ShapeError(f"TinyGPT: expected token ids of shape (B, T), got {idx.shape}")
        B, T = idx.shape
        past = kv_cache.length() if kv_cache is not None else 0
        if past + T > self.block_size:
            raise ShapeError(
                f"TinyGPT: sequence length {past + T} ({past} cached + {T} new) is longer than "
                f"block_size {self.block_size}"
            )
        tr = self.transformer
        pos = self._pos(T, idx.device) if kv_cache is None else self._pos(self.block_size, idx.device)[past : past + T]
        x = tr.drop(tr.wte(idx) + tr.wpe(pos))
        for layer, block in enumerate(tr.h):
            x = block(x, kv_cache, layer)
        logits = self.lm_head(tr.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(B * T, logits.shape[-1]), targets.reshape(B * T))
        return logits, loss

    def generate(
        self,
        idx,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        kv_cache: bool = True,
    ) -> Tensor:
        """Extend ``idx`` (B, T) int64 by ``max_new_tokens`` sampled tokens -> (B, T + max_new_tokens).

        Each step runs the model on the last ``block_size`` tokens and samples from
        ``softmax(logits / temperature)`` restricted to the ``top_k`` largest logits.
        ``temperature=0`` is greedy decoding (argmax). Sampling uses a NumPy Philox
        generator seeded with ``seed`` (None: drawn from lazyvic's global generator),
        so a seed gives the same tokens every run.

        With ``kv_cache`` (the default) the keys and values of the tokens so far are kept
        (:class:`lazyvic.nn.KVCache`) and each step computes the new token's row only; the
        lengths grow by one per step and one plan of symbolic sizes serves them all. Once the
        context holds ``block_size`` tokens, the window slides: the positions of every cached
        token change, so each later step runs the model on the last ``block_size`` tokens again
        (the same tokens as without the cache). ``kv_cache=False`` runs every step on the window
        padded to ``block_size`` positions (one plan of fixed sizes). Runs under ``no_grad``;
        dropout follows the module's mode, as in PyTorch — call ``eval()`` first.
        """
        ids = np.array(idx.numpy() if isinstance(idx, Tensor) else idx, dtype=np.int64)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ShapeError(f"TinyGPT.generate: expected idx of shape (B, T) with T >= 1, got {ids.shape}")
        if temperature < 0:
            raise ValueError(f"TinyGPT.generate: temperature must be >= 0, got {temperature}")
        vocab = self.config["vocab_size"]
        if top_k is not None and not 1 <= top_k:
            raise ValueError(f"TinyGPT.generate: top_k must be >= 1, got {top_k}")
        if seed is None:
            seed = list(default_generator.take(4))  # (global seed, offset): advances the global stream
        rng = np.random.Generator(np.random.Philox(seed))
        device = self.transformer.wte.weight.device  # the window goes where .to() put the model
        B, W = ids.shape[0], self.block_size
        if kv_cache:
            return Tensor(self._generate_cached(ids, max_new_tokens, temperature, top_k, vocab, rng, device))
        window = np.zeros((B, W), dtype=np.int64)
        with autograd.no_grad():
            for _ in range(max_new_tokens):
                ctx = ids[:, -W:]
                n = ctx.shape[1]
                window[:, :n] = ctx
                window[:, n:] = 0
                logits = self(Tensor(window).to(device)).numpy()[:, n - 1, :].astype(np.float64)
                ids = np.concatenate([ids, self._sample(logits, temperature, top_k, vocab, rng)], axis=1)
        return Tensor(ids)

    def _generate_cached(self, ids, max_new_tokens: int, temperature: float, top_k, vocab: int, rng, device):
        W = self.block_size
        cache, feed = F.KVCache(), ids[:, -W:]
        with autograd.no_grad():
            for _ in range(max_new_tokens):
                if cache.length() + feed.shape[1] > W:  # the window slides: new positions for every token
                    cache, feed = F.KVCache(), ids[:, -W:]
                logits = self(Tensor(feed).to(device), kv_cache=cache)[:, -1, :].numpy().astype(np.float64)
                feed = self._sample(logits, temperature, top_k, vocab, rng)
                ids = np.concatenate([ids, feed], axis=1)
        return ids

    @staticmethod
    def _sample(logits: np.ndarray, temperature: float, top_k, vocab: int, rng) -> np.ndarray:
        if temperature == 0:
            return logits.argmax(axis=1)[:, None]
        logits = logits / temperature
        if top_k is not None and top_k < vocab:
            kth = np.sort(logits, axis=1)[:, -top_k][:, None]
            logits = np.where(logits < kth, -np.inf, logits)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        u = rng.random((logits.shape[0], 1))
        # Inverse-CDF draw: the first token whose cumulative probability exceeds u.
        return np.minimum((p.cumsum(axis=1) <= u).sum(axis=1), vocab - 1)[:, None]
