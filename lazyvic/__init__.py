"""lazyvic: PyTorch-style tensors that record a lazy graph and run it as cached, fused, compiled plans.

This module only re-exports the public API (``import lazyvic as torch`` style); each name lives
in its own module: ``tensor`` (the Tensor class, ``where``, ``matmul``), ``creation``
(``tensor``, ``zeros``, ``arange`` ...), ``random`` (``manual_seed``, ``rand`` ...),
``indexing`` (``cat``, ``stack``), ``functions`` (the module-level twins of the Tensor methods:
``exp``, ``sum``, ``max``, ``topk``, ``einsum`` ...), ``linalg`` (norms), ``sync`` (``sync``,
deterministic mode), ``modes`` (grad mode), ``capture`` (``compile``), ``amp`` (``autocast``), ``interop`` (``save``, ``load``,
ONNX, PyTorch checkpoints), ``tools`` (``viz``, ``explain``).
"""

from lazyvic import errors
from lazyvic.creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    logspace,
    ones,
    ones_like,
    tensor,
    tril,
    triu,
    zeros,
    zeros_like,
)
from lazyvic.dtypes import DType, bool_, float32, float64, int32, int64
from lazyvic.functions import *  # noqa: F403 (PyTorch's module-level twins of the Tensor methods; functions.__all__)
from lazyvic.indexing import cat, stack
from lazyvic.modes import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from lazyvic.random import (
    get_rng_state,
    initial_seed,
    manual_seed,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    set_rng_state,
)
from lazyvic.runtime import metrics
from lazyvic.shapes import broadcast_shapes
from lazyvic.sync import are_deterministic_algorithms_enabled, sync, use_deterministic_algorithms
from lazyvic.tensor import Tensor, matmul

bool = bool_  # noqa: A001  (PyTorch spells it lazyvic.bool)
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001

from lazyvic import amp, cuda, data, functional, linalg, models, nn, onnx, optim  # noqa: E402
from lazyvic.amp import autocast, bfloat16, float16  # noqa: E402  (autocast precisions, not tensor dtypes)
from lazyvic.capture import compile  # noqa: E402, A004 - PyTorch's name
from lazyvic.interop.format_v1 import load, save  # noqa: E402
from lazyvic.tools import viz  # noqa: E402
from lazyvic.tools.explain import explain  # noqa: E402

__version__ = "0.1.0"
