"""lazyvic: PyTorch-style tensors that record a lazy graph and run it as cached, fused, compiled plans."""

from lazyvic import errors
from lazyvic.autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from lazyvic.dtypes import DType, bool_, float32, float64, int32, int64
from lazyvic.runtime import metrics
from lazyvic.runtime.capture import compile  # noqa: A004 - PyTorch's name
from lazyvic.tensor import (
    Tensor,
    arange,
    are_deterministic_algorithms_enabled,
    broadcast_shapes,
    cat,
    empty,
    eye,
    from_numpy,
    full,
    full_like,
    get_rng_state,
    initial_seed,
    manual_seed,
    matmul,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    set_rng_state,
    stack,
    sync,
    tensor,
    tril,
    triu,
    use_deterministic_algorithms,
    where,
    zeros,
    zeros_like,
)

bool = bool_  # noqa: A001  (PyTorch spells it lazyvic.bool)
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001

from lazyvic import cuda, data, functional, models, nn, onnx, optim  # noqa: E402
from lazyvic.interop.format_v1 import load, save  # noqa: E402

__version__ = "0.1.0"
from lazyvic import amp  # noqa: E402
from lazyvic.amp import autocast, bfloat16, float16  # noqa: E402  (autocast precisions, not tensor dtypes)
from lazyvic.tools import viz  # noqa: E402
from lazyvic.tools.explain import explain  # noqa: E402
