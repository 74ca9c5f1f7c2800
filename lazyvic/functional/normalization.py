"""Normalization: ``batch_norm``, ``layer_norm``, ``group_norm``, ``instance_norm``, ``rms_norm``,
``normalize``.

Each normalizes with the biased variance of the values it averages over and ``rsqrt(var + eps)``
(Ioffe & Szegedy 2015; Ba et al. 2016; Wu & He 2018; Ulyanov et al. 2016), as PyTorch; running
statistics are updated in place, without gradient, with the unbiased variance. ``rms_norm``
divides by the root mean square instead, without centring (Zhang & Sennrich 2019).
"""

from __future__ import annotations

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.functional.pooling import avg_pool2d
from lazyvic.tensor import Tensor
from lazyvic.trace.composite import mark


def _normalized(x: Tensor, axes: tuple, eps: float) -> tuple:
    """(x - mean) / sqrt(var + eps) over ``axes`` (biased variance), and the mean and variance."""
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(axes, keepdim=True)
    return xc * (var + eps).rsqrt(), mean, var


def _check_param(name: str, what: str, t, c: int, input: Tensor) -> None:
    if t is not None and t.shape != (c,):
        raise ShapeError(f"{name}: {what} shape {t.shape} does not fit input {input.shape} ({c} channels)")


def _affine(y: Tensor, weight, bias, bshape: tuple) -> Tensor:
    if weight is not None:
        y = y * weight.reshape(*bshape)
    if bias is not None:
        y = y + bias.reshape(*bshape)
    return y


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalization over channel axis 1, as ``torch.nn.functional.batch_norm``.

    input (N, C, ...); running_mean, running_var, weight, bias (C,). In training the batch mean
    and biased variance over every axis but 1 normalize, and the running statistics (if given)
    are updated in place, without gradient: ``r = (1 - momentum) * r + momentum * batch``, with
    the unbiased batch variance. In evaluation the running statistics normalize.
    """
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected input (N, C, ...), got shape {input.shape}")
    c = input.shape[1]
    for what, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (c,):
            raise ShapeError(f"batch_norm: {what} shape {t.shape} does not fit input {input.shape} ({c} channels)")
    axes = (0, *range(2, input.ndim))
    bshape = (c,) + (1,) * (input.ndim - 2)
    if training:
        count = input.numel() // c
        if count <= 1:
            raise ValueError(
                f"batch_norm: expected more than 1 value per channel when training, got input {input.shape}"
            )
        mean = input.mean(axes, keepdim=True)
        xc = input - mean
        var = (xc * xc).mean(axes, keepdim=True)
        if running_mean is not None and running_var is not None:
            with modes.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.detach().reshape(c) * momentum)
                unbiased = var.detach().reshape(c) * (count / (count - 1))
                running_var.mul_(1 - momentum).add_(unbiased * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: evaluation (training=False) needs running_mean and running_var")
        xc = input - running_mean.reshape(*bshape)
        var = running_var.reshape(*bshape)
    y = xc * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(*bshape)
    if bias is not None:
        y = y + bias.reshape(*bshape)
    if not training and weight is not None and bias is not None:
        return mark(y, "BatchNormalization", (input, weight, bias, running_mean, running_var), epsilon=eps)
    return y


def layer_norm(input: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` axes, as ``torch.nn.functional.layer_norm``.

    input (..., *normalized_shape); weight and bias ``normalized_shape``. Raises ShapeError when the
    input's trailing axes, the weight or the bias do not match ``normalized_shape``."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    n = len(shape)
    x = input
    if x.shape[x.ndim - n :] != shape or x.ndim < n:
        raise ShapeError(f"layer_norm: input shape {x.shape} does not end with normalized_shape {shape}")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != shape:
            raise ShapeError(f"layer_norm: {what} shape {t.shape} does not match normalized_shape {shape}")
    axes = tuple(range(x.ndim - n, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(axes, keepdim=True)
    y = xc * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    if weight is not None:
        return mark(y, "LayerNormalization", (x, weight, bias), min_opset=17, axis=-n, epsilon=eps)
    return y


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """Root mean square normalization over the last ``len(normalized_shape)`` axes, as
    ``torch.nn.functional.rms_norm`` (``torch.nn.RMSNorm``'s formula):
    ``y = x / sqrt(mean(x^2) + eps) * weight``.

    input (..., *normalized_shape), floating-point; weight ``normalized_shape`` (or None). ``eps``
    None means the machine epsilon of the computation dtype: ``finfo(input.dtype).eps``, and
    float32's for float16/bfloat16 inputs, which are computed in float32 and rounded once (as
    PyTorch's kernel does). The result has the input's dtype. Raises ShapeError when the input's
    trailing axes or the weight do not match ``normalized_shape``, DTypeError for a non-floating
    input."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    n = len(shape)
    x = input
    if not x.dtype.is_floating_point:
        raise DTypeError(f"rms_norm: expected a floating-point input, got {x.dtype.name}")
    if x.ndim < n or x.shape[x.ndim - n :] != shape:
        raise ShapeError(f"rms_norm: input shape {x.shape} does not end with normalized_shape {shape}")
    if weight is not None and weight.shape != shape:
        raise ShapeError(f"rms_norm: weight shape {weight.shape} does not match normalized_shape {shape}")
    if eps is None:
        eps = dt.finfo(x.dtype).eps
    axes = tuple(range(x.ndim - n, x.ndim))
    y = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y.to(x.dtype) if y.dtype is not x.dtype else y


def group_norm(input: Tensor, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Group normalization (Wu & He 2018), as ``torch.nn.functional.group_norm``: the C channels
    of input (N, C, ...) split into ``num_groups`` groups; each (sample, group) is normalized over
    its channels and positions; then ``weight``/``bias`` (C,) scale and shift each channel.

    Raises ShapeError for an input of fewer than 2 axes, channels not divisible by ``num_groups``,
    or a weight/bias that is not (C,)."""
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected input (N, C, ...), got shape {input.shape}")
    n, c = input.shape[:2]
    if num_groups < 1 or c % num_groups:
        raise ShapeError(
            f"group_norm: expected the number of channels {c} of input {input.shape} to be divisible "
            f"by num_groups={num_groups}"
        )
    _check_param("group_norm", "weight", weight, c, input)
    _check_param("group_norm", "bias", bias, c, input)
    grouped = input.reshape(n, num_groups, -1)
    y, _, _ = _normalized(grouped, (2,), eps)
    bshape = (c,) + (1,) * (input.ndim - 2)
    return _affine(y.reshape(*input.shape), weight, bias, bshape)


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Instance normalization (Ulyanov et al. 2016), as ``torch.nn.functional.instance_norm``: each
    (sample, channel) of input (N, C, *spatial) is normalized over its positions.

    With ``use_input_stats`` the statistics of the input normalize, and ``running_mean`` /
    ``running_var`` (C,), when given, are updated in place without gradient with their mean over
    the batch: ``r = (1 - momentum) * r + momentum * mean_n(stat)`` (unbiased variance). Otherwise
    the running statistics normalize. ``weight``/``bias`` (C,) scale and shift each channel.

    Raises ShapeError for an input without spatial axes or with a single position, or
    parameters that are not (C,); ValueError when evaluation has no running statistics."""
    if input.ndim < 3:
        raise ShapeError(f"instance_norm: expected input (N, C, *spatial), got shape {input.shape}")
    n, c = input.shape[:2]
    for what, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        _check_param("instance_norm", what, t, c, input)
    axes = tuple(range(2, input.ndim))
    bshape = (c,) + (1,) * (input.ndim - 2)
    if use_input_stats:
        count = input.numel() // (n * c) if n * c else 0
        if count <= 1:
            raise ShapeError(
                f"instance_norm: expected more than 1 spatial element when training, got input {input.shape}"
            )
        y, mean, var = _normalized(input, axes, eps)
        if running_mean is not None and running_var is not None:
            with modes.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.detach().reshape(n, c).mean(0) * momentum)
                unbiased = var.detach().reshape(n, c).mean(0) * (count / (count - 1))
                running_var.mul_(1 - momentum).add_(unbiased * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and running_var")
        y = (input - running_mean.reshape(*bshape)) * (running_var.reshape(*bshape) + eps).rsqrt()
    return _affine(y, weight, bias, bshape)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim``, as ``torch.nn.functional.normalize``."""
    if out is not None:
        raise ValueError("normalize: out= is not supported (lazyvic tensors are immutable values)")
    a = input.abs()
    if p == 2:
        norm = (a * a).sum(dim, keepdim=True).sqrt()
    elif p == 1:
        norm = a.sum(dim, keepdim=True)
    elif p == float("inf"):
        norm = a.amax(dim, keepdim=True)
    else:
        norm = (a**p).sum(dim, keepdim=True) ** (1.0 / p)
    return input / norm.clamp(min=eps)


# Composites computed in float32 on half tensors and rounded once (PyTorch's opmath).
dt.widen_halves(globals(), ("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm", "normalize"))


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """Local response normalization across channels (Krizhevsky et al. 2012, AlexNet), with
    PyTorch's formula (``torch.nn.functional.local_response_norm``):
    ``y = x / (k + alpha * avg) ** beta``, where ``avg`` at channel c is the mean of ``x**2`` over
    the ``size`` channels c - size//2 .. c + (size-1)//2, zero padded (so always divided by
    ``size``, as PyTorch's average pool).

    input (N, C, *) with at least 3 axes, floating point -> the same shape and dtype.

    Raises:
        ShapeError: an input of fewer than 3 axes. ArgumentError: a size below 1.
        DTypeError: a non-floating input.
    """
    if input.ndim < 3:
        raise ShapeError(
            f"local_response_norm: expected an input (N, C, *) of 3 or more dimensions, got shape {input.shape}"
        )
    if not isinstance(size, int) or size < 1:
        raise ArgumentError(f"local_response_norm: size must be a positive int, got {size!r}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"local_response_norm: expected a floating-point input, got {input.dtype.name}")
    n, c = input.shape[:2]
    sq = (input * input).reshape(n, 1, c, -1)
    sq = sq._pad(((0, 0), (0, 0), (size // 2, (size - 1) // 2), (0, 0)))
    avg = avg_pool2d(sq, (size, 1), stride=1).reshape(input.shape)
    return input / (avg * alpha + k) ** beta
