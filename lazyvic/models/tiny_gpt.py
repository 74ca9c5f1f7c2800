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
from lazyvic.capture import compile as capture
from lazyvic.creation import arange, band_mask
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

    def forward(self, x: Tensor, kv_cache: F.KVCache | None = None, layer: int = 0, keep: int = 0) -> Tensor:
        """``keep`` > 0: the outputs of the last ``keep`` rows only (every row's key and value
        is still computed, the queries of those rows only): (B, keep, C)."""
        B, T, C = x.shape
        H = self.n_head
        L, mask = T, None
        if 0 < keep < T:  # the queries of the last rows only: c_attn's rows for q, then for k and v
            w, b = self.c_attn.weight, self.c_attn.bias
            q = F.linear(x[:, T - keep :], w[:C], b[:C])
            k, v = F.linear(x, w[C:], b[C:]).split(C, dim=2)
            L = keep
            if kv_cache is None:  # the causal mask aligned to the end (the cache aligns its own)
                mask = _end_causal_mask(L, T, x.device)
        else:
            q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.reshape(B, L, H, C // H).transpose(1, 2)  # (B, H, L, D)
        k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in (k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None,
            kv_cache=kv_cache,
            layer=layer,
        )
        y = y.transpose(1, 2).reshape(B, L, C)
        return self.resid_dropout(self.c_proj(y))


_end_masks: dict = {}


def _end_causal_mask(L: int, S: int, device: str) -> Tensor:
    """(L, S) bool: the last L of S queries, causal (one realized tensor per shape and device)."""
    m = _end_masks.get((L, S, device))
    if m is None:
        m = _end_masks[(L, S, device)] = band_mask(L, S, diagonal=S - L, device=device)
    return m


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

    def forward(self, x: Tensor, kv_cache: F.KVCache | None = None, layer: int = 0, keep: int = 0) -> Tensor:
        """x (B, T, C) -> (B, T, C); ``keep`` > 0: the last ``keep`` rows only, (B, keep, C)."""
        y = self.attn(self.ln_1(x), kv_cache, layer, keep)
        x = (x[:, x.shape[1] - keep :] if 0 < keep < x.shape[1] else x) + y
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

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        kv_cache: F.KVCache | None = None,
        logits_to_keep: int = 0,
    ):
        """Logits (B, T, vocab) of the tokens ``idx`` (B, T); with ``targets``, ``(logits, loss)``.

        ``kv_cache`` (:class:`lazyvic.nn.KVCache`): ``idx`` are the next tokens after those the
        cache has seen (positions ``past .. past + T - 1``); their keys and values are added
        and only their logits are computed — autoregressive decoding. A static cache
        (``KVCache(max_length=block_size)``) takes the positions from its position tensor, so
        every decoding step is the same trace.

        ``logits_to_keep`` > 0 (Hugging Face's name): the logits of the last ``logits_to_keep``
        positions only, (B, logits_to_keep, vocab); the last block then computes those rows only
        (the others' keys and values are all it needs). Not with ``targets``.

        Raises ShapeError for ids that are not (B, T) or positions past ``block_size``."""
        if idx.ndim != 2:
            raise ShapeError(f"TinyGPT: expected token ids of shape (B, T), got {idx.shape}")
        B, T = idx.shape
        past = kv_cache.length() if kv_cache is not None else 0
        if past is not None and past + T > self.block_size:
            raise ShapeError(
                f"TinyGPT: sequence length {past + T} ({past} cached + {T} new) is longer than "
                f"block_size {self.block_size}"
            )
        if logits_to_keep and targets is not None:
            raise ValueError("TinyGPT: logits_to_keep and targets cannot be given together")
        keep = logits_to_keep if 0 < logits_to_keep < T else 0
        tr = self.transformer
        if kv_cache is None:
            pos = self._pos(T, idx.device)
        elif kv_cache.static:  # positions as data: the same trace at every position
            pos = kv_cache.position(0).to(idx.device) + self._pos(T, idx.device)
        else:
            pos = self._pos(self.block_size, idx.device)[past : past + T]
        x = tr.drop(tr.wte(idx) + tr.wpe(pos))
        last = len(tr.h) - 1
        for layer, block in enumerate(tr.h):
            x = block(x, kv_cache, layer, keep if layer == last else 0)
        if keep and x.shape[1] != keep:  # no blocks
            x = x[:, T - keep :]
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

        With ``kv_cache`` (the default) the prompt fills a static cache
        (:class:`lazyvic.nn.KVCache` with ``max_length=block_size``) and each later step runs
        the new token only, its position as data: every step has the same shapes and replays one
        compiled plan (``lazyvic.compile``) without recording. Once the context holds
        ``block_size`` tokens the window slides: the positions of every token change, so each
        later step runs the last ``block_size`` tokens whole (a replay of fixed shapes too; the
        same tokens as without the cache, and the last block computes the last row only).
        ``kv_cache=False`` runs every step on the window padded to ``block_size`` positions.
        Runs under ``no_grad``; dropout follows the module's mode, as in PyTorch — call
        ``eval()`` first (in training mode each step records: dropout draws new numbers).
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
        prefill, decode, window = self._compiled_steps()
        for step in (prefill, decode, window):
            step.train(self.training)  # the replays' guard reads the wrapper's mode
        logits = state = None
        with autograd.no_grad():
            if ids.shape[1] < W:  # the prompt fills a static cache (the prefill)
                logits, *state = prefill(Tensor(ids).to(device))
                logits = logits.numpy()
            for i in range(max_new_tokens):
                if logits is None:  # the window slides: every position changes, run it whole
                    logits = window(Tensor(ids[:, -W:]).to(device)).numpy()
                nxt = self._sample(logits.astype(np.float64), temperature, top_k, vocab, rng)
                ids = np.concatenate([ids, nxt], axis=1)
                logits = None
                if state is not None and ids.shape[1] <= W and i + 1 < max_new_tokens:
                    logits, *state = decode(Tensor(nxt).to(device), *state)
                    logits = logits.numpy()
                else:
                    state = None
        return ids

    def _compiled_steps(self):
        """The prefill (the prompt into a new static cache), the decoding step (one token through
        the cache) and the sliding-window step, as ``lazyvic.compile`` replays: each runs its
        plan without recording (the prefill once per prompt length)."""
        steps = self.__dict__.get("_steps")
        if steps is None:
            steps = self.__dict__["_steps"] = (
                capture(_PrefillStep(self)),
                capture(_DecodeStep(self)),
                capture(_WindowStep(self)),
            )
        return steps

    def __getstate__(self):  # copies and pickles leave the compiled steps behind
        state = self.__dict__.copy()
        state.pop("_steps", None)
        return state

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


class _PrefillStep(nn.Module):
    """The prompt ``idx`` (B, T), T < block_size, into a new static KV cache:
    ``idx -> (logits of its last position (B, vocab), *cache state)``."""

    def __init__(self, model: TinyGPT):
        super().__init__()
        self.model = model

    def forward(self, idx: Tensor):
        cache = F.KVCache(max_length=self.model.block_size)
        logits = self.model(idx, kv_cache=cache, logits_to_keep=1)[:, -1, :]
        return (logits, *cache.state())


class _DecodeStep(nn.Module):
    """One decoding step of ``model`` through a static KV cache carried as tensors:
    ``(token (B, 1), *state) -> (logits (B, vocab), *new state)``."""

    def __init__(self, model: TinyGPT):
        super().__init__()
        self.model = model

    def forward(self, tok: Tensor, *state: Tensor):
        cache = F.KVCache.from_state(state, self.model.block_size)
        logits = self.model(tok, kv_cache=cache, logits_to_keep=1)[:, -1, :]
        return (logits, *cache.state())


class _WindowStep(nn.Module):
    """The logits (B, vocab) of the last position of a full window (B, block_size)."""

    def __init__(self, model: TinyGPT):
        super().__init__()
        self.model = model

    def forward(self, idx: Tensor) -> Tensor:
        return self.model(idx, logits_to_keep=1)[:, -1, :]
