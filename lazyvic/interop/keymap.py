r"""Renaming and reshaping the keys of a foreign state_dict so it loads into a lazyvic model.

Checkpoints written by other code rarely use our parameter names verbatim:
``nn.DataParallel`` prefixes every key with ``module.``, ``torch.compile`` with
``_orig_mod.``, and Hugging Face's GPT-2 stores its projections as ``Conv1D``
weights of shape (in, out) where our ``nn.Linear`` (like PyTorch's) holds
(out, in). :func:`remap` applies such fixes as data -- prefixes, regex rename
rules and per-key transforms -- and refuses to silently merge two keys.
``Module.load_state_dict`` then checks the result (missing, unexpected and
mis-shaped keys are all listed at once, and nothing is assigned on error).

Example -- a checkpoint saved from a ``DataParallel``-wrapped, compiled model
(keys such as ``_orig_mod.module.0.weight``)::

    sd = lazyvic.interop.torch.load("ckpt.pt")
    model.load_state_dict(remap(sd, strip_prefix=("_orig_mod.", "module.")))  # -> 0.weight, ...

Example -- Hugging Face GPT-2 into ``lazyvic.models.TinyGPT``. ``GPT2LMHeadModel``
uses nanoGPT's names (``transformer.h.0.attn.c_attn.weight``, ``lm_head.weight``),
so only its ``Conv1D`` weights need transposing and the causal-mask buffers
(``transformer.h.0.attn.bias``, in older versions also ``attn.masked_bias``) dropping::

    sd = remap(
        hf_state_dict,
        drop=[r".*\.attn\.(masked_)?bias"],          # not parameters ("c_attn.bias" is kept)
        transforms={GPT2_CONV1D_WEIGHTS: transpose},  # Conv1D (in, out) -> Linear (out, in)
        strict=True,                                  # a pattern that matches nothing is an error
    )
    model.load_state_dict(sd)

``GPT2Model`` (no head) saves the same keys without ``transformer.``; add
``rules=[(r"^(wte|wpe|h|ln_f)\.", r"transformer.\1.")]`` (``h.0.attn.c_attn.weight``
-> ``transformer.h.0.attn.c_attn.weight``) and load with ``strict=False``, which
returns ``lm_head.weight`` among the missing keys. nanoGPT's ``GPT.from_pretrained``
transposes the same four weights (``attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc``,
``mlp.c_proj``). The names and shapes then fit; the numbers will not match the
original model exactly, since GPT-2 uses the tanh approximation of GELU and ties
``lm_head`` to ``wte``, while TinyGPT uses the exact GELU.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from lazyvic.errors import CheckpointError, ShapeError
from lazyvic.tensor import Tensor

Transform = Callable[[np.ndarray], np.ndarray]

# The four GPT-2 weights that Hugging Face stores as Conv1D (in, out), matched after renaming.
GPT2_CONV1D_WEIGHTS = r"(.*\.)?h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight"


# ------------------------------------------------------------- ready-made transforms
def transpose(a: np.ndarray) -> np.ndarray:
    """(in, out) -> (out, in): a 2-D array's transpose (C-contiguous copy).

    Turns a Conv1D / TensorFlow-style dense weight into an ``nn.Linear`` weight and
    back. Raises ShapeError for arrays that are not 2-D.
    """
    if a.ndim != 2:
        raise ShapeError(f"keymap.transpose: expects a 2-D weight, got shape {a.shape}")
    return np.ascontiguousarray(a.T)


def astype(dtype) -> Transform:
    """A transform casting to ``dtype`` (a NumPy dtype), e.g. ``astype(np.float32)`` for a
    float16 checkpoint read as NumPy arrays (lazyvic has no float16)."""
    target = np.dtype(dtype)

    def cast(a: np.ndarray) -> np.ndarray:
        return a.astype(target, copy=False)

    cast.__name__ = f"astype({target})"
    return cast


def reshape(*shape: int) -> Transform:
    """A transform reshaping to ``shape`` (one entry may be -1), e.g. ``reshape(-1)`` for a
    bias saved as (1, n). Raises ShapeError when the sizes do not fit."""

    def to_shape(a: np.ndarray) -> np.ndarray:
        try:
            return np.ascontiguousarray(a.reshape(shape))
        except ValueError:
            raise ShapeError(f"keymap.reshape: cannot reshape {a.shape} to {shape}") from None

    to_shape.__name__ = f"reshape{shape}"
    return to_shape


# ----------------------------------------------------------------------------- remap
def remap(
    state_dict: Mapping,
    rules: Iterable[tuple[str, str]] = (),
    strip_prefix: str | tuple[str, ...] | None = None,
    transforms: Mapping[str, Transform] | None = None,
    strict: bool = False,
    drop: Iterable[str] = (),
) -> OrderedDict:
    """A new OrderedDict with ``state_dict``'s entries renamed and transformed, in its order.

    Each key goes through these steps in this order:

    1. ``drop``: regexes matched with ``re.fullmatch`` against the original key; a
       matching entry is left out (e.g. non-parameter buffers such as HF GPT-2's
       ``h.0.attn.bias`` causal masks).
    2. ``strip_prefix``: a string or a tuple of strings; each, in the given order,
       is removed from the start of the key if the key starts with it, so
       ``("_orig_mod.", "module.")`` turns ``_orig_mod.module.fc.weight`` into
       ``fc.weight`` and leaves keys without them alone.
    3. ``rules``: ``(pattern, replacement)`` pairs applied in order with
       ``re.sub(pattern, replacement, key)`` (so ``\\1`` refers to a group;
       anchor with ``^``/``$`` as needed). Each rule sees the previous one's output.
    4. ``transforms``: ``{regex: fn}``; every regex that ``re.fullmatch``-es the
       *renamed* key applies its ``fn`` (in dict order) to the value. ``fn`` maps a
       NumPy array to a NumPy array and must not modify its argument in place.
       A lazyvic Tensor value is passed as ``value.numpy()`` and the result made a
       Tensor again with ``lazyvic.tensor`` (so it is a new leaf); a NumPy value
       stays NumPy. Ready-made: :func:`transpose`, :func:`astype`, :func:`reshape`.

    Values without a transform are passed through unchanged (the same objects).

    Raises CheckpointError when two original keys end up with the same new key
    (naming both), and, with ``strict=True``, when a ``rules`` pattern, a
    ``transforms`` regex or a ``drop`` regex matches no key at all (naming it --
    usually a typo or the wrong checkpoint). Prefixes are never strict: a tuple of
    alternatives is expected to leave some unused. Errors raised by a transform
    are re-raised as CheckpointError naming the key (the original error chained).
    """
    prefixes = (strip_prefix,) if isinstance(strip_prefix, str) else tuple(strip_prefix or ())
    rules = [(re.compile(p), r) for p, r in rules]
    drop = [re.compile(p) for p in drop]
    transforms = [(re.compile(p), fn) for p, fn in (transforms or {}).items()]

    rule_hits = [0] * len(rules)
    drop_hits = [0] * len(drop)
    transform_hits = [0] * len(transforms)
    out: OrderedDict = OrderedDict()
    source: dict[str, str] = {}  # new key -> the original key it came from
    for key, value in state_dict.items():
        dropped = [i for i, pat in enumerate(drop) if pat.fullmatch(key)]
        for i in dropped:
            drop_hits[i] += 1
        if dropped:
            continue
        new = key
        for p in prefixes:
            if new.startswith(p):
                new = new[len(p) :]
        for i, (pat, repl) in enumerate(rules):
            new, n = pat.subn(repl, new)
            rule_hits[i] += n > 0
        if new in source:
            raise CheckpointError(
                f"remap: keys {source[new]!r} and {key!r} both map to {new!r}; "
                "make the rules tell them apart or drop one"
            )
        source[new] = key
        for i, (pat, fn) in enumerate(transforms):
            if pat.fullmatch(new):
                transform_hits[i] += 1
                value = _apply(fn, value, key, new)
        out[new] = value

    if strict:
        # Patterns are shown as written (repr would double every backslash).
        unused = [f"rule '{pat.pattern}' -> '{repl}'" for (pat, repl), n in zip(rules, rule_hits) if not n]
        unused += [
            f"transform '{pat.pattern}' ({_name(fn)})" for (pat, fn), n in zip(transforms, transform_hits) if not n
        ]
        unused += [f"drop '{pat.pattern}'" for pat, n in zip(drop, drop_hits) if not n]
        if unused:
            raise CheckpointError(
                f"remap (strict): matched no key of the {len(state_dict)}-key state_dict: " + "; ".join(unused)
            )
    return out


def _apply(fn: Transform, value, key: str, new: str):
    is_tensor = isinstance(value, Tensor)
    try:
        result = fn(value.numpy() if is_tensor else np.asarray(value))
    except Exception as e:
        shown = key if key == new else f"{key!r} (renamed {new!r})"
        raise CheckpointError(f"remap: transform {_name(fn)} failed on {shown}: {e}") from e
    if is_tensor:
        return result if isinstance(result, Tensor) else Tensor(np.asarray(result))
    return result.numpy() if isinstance(result, Tensor) else np.asarray(result)


def _name(fn) -> str:
    return getattr(fn, "__name__", repr(fn))


__all__ = ["remap", "transpose", "astype", "reshape", "GPT2_CONV1D_WEIGHTS"]
