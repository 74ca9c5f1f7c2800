"""BERT encoder (Devlin et al. 2019) for benchmarks/gpu.py, written once for lazyvic and PyTorch.

``bert_model(lib, cfg)`` builds the same module tree on ``lib = "lazyvic"`` or ``"torch"``: the
two libraries share the names used here (``nn.Module``, ``nn.Linear``, ``nn.Embedding``,
``nn.LayerNorm``, ``F.scaled_dot_product_attention``, ``F.gelu``), so one definition gives a
twin that cannot drift from the original. Parameter names are Hugging Face's ``BertModel``
ones (``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query.weight``,
...), so a real checkpoint such as google/bert_uncased_L-4_H-512_A-8 loads by name (its pooler
aside, with ``strict=False``).

Model: word + position + token-type embeddings, LayerNorm; post-norm encoder layers
(self-attention with separate query/key/value projections, output projection, residual,
LayerNorm; exact-GELU feed-forward, residual, LayerNorm); eps 1e-12; no pooler, no dropout
(inference), no attention mask (every sequence is full length). Output: the last hidden
state, (batch, seq, hidden) float32.

This module imports neither library at import time: benchmarks/gpu.py's parent process
must import neither.
"""

from __future__ import annotations

import numpy as np

# BERT-small (Turc et al. 2019, "Well-Read Students Learn Better"; google/bert_uncased_L-4_H-512_A-8).
BERT_SMALL = dict(
    vocab=30522, hidden=512, layers=4, heads=8, intermediate=2048, max_positions=512, type_vocab=2, eps=1e-12
)
# For CPU validation of the harness (--tiny): the same code at toy sizes.
BERT_TINY = dict(vocab=1000, hidden=64, layers=2, heads=4, intermediate=256, max_positions=64, type_vocab=2, eps=1e-12)


def state_shapes(cfg: dict) -> list:
    """(key, shape) of the state_dict, in module order."""
    h, i = cfg["hidden"], cfg["intermediate"]
    out = [
        ("embeddings.word_embeddings.weight", (cfg["vocab"], h)),
        ("embeddings.position_embeddings.weight", (cfg["max_positions"], h)),
        ("embeddings.token_type_embeddings.weight", (cfg["type_vocab"], h)),
        ("embeddings.LayerNorm.weight", (h,)),
        ("embeddings.LayerNorm.bias", (h,)),
    ]
    for n in range(cfg["layers"]):
        p = f"encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            out += [(p + name + ".weight", (h, h)), (p + name + ".bias", (h,))]
        out += [(p + "attention.output.LayerNorm.weight", (h,)), (p + "attention.output.LayerNorm.bias", (h,))]
        out += [(p + "intermediate.dense.weight", (i, h)), (p + "intermediate.dense.bias", (i,))]
        out += [(p + "output.dense.weight", (h, i)), (p + "output.dense.bias", (h,))]
        out += [(p + "output.LayerNorm.weight", (h,)), (p + "output.LayerNorm.bias", (h,))]
    return out


def init_state(cfg: dict, seed: int = 0) -> dict:
    """key -> float32 array, drawn with NumPy: BERT's N(0, 0.02) for weights and embeddings;
    biases N(0, 0.02) and LayerNorm scales 1 + N(0, 0.05) rather than 0 and 1, so that the
    check against the twin exercises every parameter."""
    rng = np.random.default_rng(seed)
    state = {}
    for key, shape in state_shapes(cfg):
        if "LayerNorm.weight" in key:
            state[key] = (1.0 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
        else:
            state[key] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
    return state


def input_ids(cfg: dict, batch: int, seq: int, seed: int = 1) -> np.ndarray:
    """(batch, seq) int64 token ids, uniform over the vocabulary."""
    return np.random.default_rng(seed + batch).integers(0, cfg["vocab"], size=(batch, seq), dtype=np.int64)


def bert_model(lib: str, cfg: dict):
    """The BERT encoder as a ``lib`` module (``"lazyvic"`` or ``"torch"``), freshly initialized
    by ``lib``; load :func:`init_state` into it. ``forward(input_ids, token_type_ids=None)``:
    (N, S) int64 -> (N, S, hidden) float32."""
    if lib == "lazyvic":
        import lazyvic as T
        import lazyvic.functional as F
        from lazyvic import nn
    elif lib == "torch":
        import torch as T
        import torch.nn.functional as F
        from torch import nn
    else:
        raise ValueError(f"bert_model: lib must be 'lazyvic' or 'torch', got {lib!r}")
    hidden, heads, eps = cfg["hidden"], cfg["heads"], cfg["eps"]

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(cfg["vocab"], hidden)
            self.position_embeddings = nn.Embedding(cfg["max_positions"], hidden)
            self.token_type_embeddings = nn.Embedding(cfg["type_vocab"], hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
            # Buffers (as Hugging Face's), so they move with the module and no step copies ids to the device.
            positions = T.arange(cfg["max_positions"]).reshape(1, -1)
            self.register_buffer("position_ids", positions, persistent=False)
            self.register_buffer("token_type_ids", T.zeros(1, cfg["max_positions"], dtype=T.int64), persistent=False)

        def forward(self, ids, token_type_ids=None):
            n, s = ids.shape
            if token_type_ids is None:
                token_type_ids = self.token_type_ids[:, :s].expand(n, s)
            x = (
                self.word_embeddings(ids)
                + self.position_embeddings(self.position_ids[:, :s])
                + self.token_type_embeddings(token_type_ids)
            )
            return self.LayerNorm(x)

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)

        def forward(self, x):
            n, s, _ = x.shape

            def split(t):  # (N, S, H) -> (N, heads, S, H / heads)
                return t.reshape(n, s, heads, hidden // heads).transpose(1, 2)

            out = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
            return out.transpose(1, 2).reshape(n, s, hidden)

    class AddNorm(nn.Module):  # Hugging Face's BertSelfOutput / BertOutput: LayerNorm(dense(h) + residual)
        def __init__(self, d_in):
            super().__init__()
            self.dense = nn.Linear(d_in, hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

        def forward(self, h, residual):
            return self.LayerNorm(self.dense(h) + residual)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.self = SelfAttention()
            self.output = AddNorm(hidden)

        def forward(self, x):
            return self.output(self.self(x), x)

    class Intermediate(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(hidden, cfg["intermediate"])

        def forward(self, x):
            return F.gelu(self.dense(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.intermediate = Intermediate()
            self.output = AddNorm(cfg["intermediate"])

        def forward(self, x):
            x = self.attention(x)
            return self.output(self.intermediate(x), x)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList([Layer() for _ in range(cfg["layers"])])

        def forward(self, x):
            for layer in self.layer:
                x = layer(x)
            return x

    class BertModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings()
            self.encoder = Encoder()

        def forward(self, ids, token_type_ids=None):
            return self.encoder(self.embeddings(ids, token_type_ids))

    return BertModel()
