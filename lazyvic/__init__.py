"""lazyvic: PyTorch-style tensors that record a lazy graph and run it as cached, fused, compiled plans.

This module only re-exports the public API (``import lazyvic as torch`` style); each name lives
in its own module: ``tensor`` (the Tensor class, ``where``, ``matmul``), ``creation``
(``tensor``, ``zeros``, ``arange`` ...), ``random`` (``manual_seed``, ``rand`` ...),
``indexing`` (``cat``, ``stack``), ``functions`` (the module-level twins of the Tensor methods:
``exp``, ``sum``, ``max``, ``topk``, ``einsum`` ...), ``linalg`` (norms), ``sync`` (``sync``,
deterministic mode), ``modes`` (grad mode), ``capture`` (``compile``), ``amp`` (``autocast``),
``interop`` (``save``, ``load``, ONNX, PyTorch checkpoints), ``tools`` (``viz``, ``explain``),
``generator`` (``Generator``), ``transfer`` (``device``), ``settings`` (threads, default dtype),
``size`` (``Size``), ``utils.data`` (``DataLoader`` ...).
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
from lazyvic.dtypes import (
    DType,
    bfloat16,
    bool_,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from lazyvic.functions import *  # noqa: F403 (PyTorch's module-level twins of the Tensor methods; functions.__all__)
from lazyvic.generator import Generator, default_generator
from lazyvic.indexing import cat, stack
from lazyvic.legacy import (
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
    range,  # noqa: A004 (torch.range, deprecated: an inclusive end)
)
from lazyvic.modes import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from lazyvic.random import (
    bernoulli,
    get_rng_state,
    initial_seed,
    manual_seed,
    multinomial,
    normal,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    seed,
    set_rng_state,
)
from lazyvic.settings import (
    get_default_dtype,
    get_float32_matmul_precision,
    get_num_threads,
    set_default_dtype,
    set_float32_matmul_precision,
    set_num_threads,
)
from lazyvic.shapes import broadcast_shapes
from lazyvic.size import Size
from lazyvic.sync import are_deterministic_algorithms_enabled, sync, use_deterministic_algorithms
from lazyvic.tensor import Tensor, matmul
from lazyvic.transfer import device
from lazyvic.windows import bartlett_window, blackman_window, hamming_window, hann_window, kaiser_window

bool = bool_  # noqa: A001  (PyTorch spells it lazyvic.bool)
float = float32  # noqa: A001
double = float64
long = int64
half = float16
short = int16
int = int32  # noqa: A001

# metrics and viz: the facade modules lazyvic/metrics.py and lazyvic/viz.py (importable as modules)
from lazyvic import (  # noqa: E402, I001
    accelerator,
    amp,
    autograd,
    backends,
    cuda,
    data,
    distributed,
    distributions,
    functional,
    linalg,
    metrics,
    models,
    nn,
    onnx,
    optim,
    sparse,
    special,
    testing,
    utils,
    viz,
)
from lazyvic.amp import autocast  # noqa: E402
from lazyvic.capture import compile  # noqa: E402, A004 - PyTorch's name
from lazyvic.functional.distance import cdist  # noqa: E402
from lazyvic.interop.format_v1 import load, save  # noqa: E402
from lazyvic.sparse import sparse_coo_tensor, spmm  # noqa: E402
from lazyvic.tools.explain import explain  # noqa: E402

__version__ = "0.1.0"
