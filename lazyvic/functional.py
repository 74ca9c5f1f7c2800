"""Composite ops built from primitives; fusion recovers their speed.

Formulas follow PyTorch's documentation for the function of the same name.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.creation import arange, band_mask
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.indexing import cat, stack
from lazyvic.random import rand
from lazyvic.shapes import broadcast_shapes
from lazyvic.tensor import Tensor, autocast_operands, check_index_bounds, where
from lazyvic.trace.composite import mark


def relu(x: Tensor) -> Tensor:
    return x.relu()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: ``x * Phi(x)`` (exact, with erf) or the tanh approximation (Hendrycks & Gimpel 2016)."""
    if approximate == "tanh":
        y = 0.5 * x * (1.0 + (math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    elif approximate == "none":
        y = x * 0.5 * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return mark(y, "Gelu", (x,), min_opset=20, approximate=approximate)


def silu(x: Tensor) -> Tensor:
    return x * x.sigmoid()


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return where(x > 0, x, x * negative_slope)


def softmax(x: Tensor, dim: int) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (numerically stable; ``Tensor.softmax``)."""
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int) -> Tensor:
    """``x - logsumexp(x)`` along ``dim`` (``Tensor.log_softmax``)."""
    return x.log_softmax(dim)


def one_hot(target: Tensor, num_classes: int, dtype=dt.float32) -> Tensor:
    """(N, ...) int64 class indices -> (N, ..., num_classes) one-hot (an elementwise compare)."""
    classes = arange(num_classes, device=target.device)
    return (target.unsqueeze(-1) == classes).to(dtype)


def nll_loss(logp: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Negative log likelihood of (N, C) log-probabilities at (N,) int64 targets."""
    if logp.ndim != 2 or target.shape != logp.shape[:1]:
        raise ShapeError(f"nll_loss: expected input (N, C) and target (N,), got {logp.shape} and {target.shape}")
    if target.dtype.category != 1:
        raise DTypeError(f"nll_loss: target must be an integer tensor, got {target.dtype.name}")
    # The one-hot compare is elementwise, so picking the target fuses into the row kernel.
    picked = (logp * one_hot(target, logp.shape[1], logp.dtype)).sum(1)
    valid = (target != ignore_index).to(logp.dtype)
    losses = -picked * valid
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return losses.sum() / valid.sum()
    raise ValueError(f"nll_loss: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def cross_entropy(
    input: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0
) -> Tensor:
    """Cross-entropy of (N, C) logits against (N,) int64 class indices.

    ``mean`` divides by the number of targets that are not ``ignore_index`` (PyTorch's rule).
    Raises ShapeError for mismatched shapes, DTypeError for non-integer targets.
    """
    expected = input.shape[:1] + input.shape[2:]
    if input.ndim < 2 or target.shape != expected:
        raise ShapeError(
            f"cross_entropy: expected logits (N, C, ...) and target {expected}, got {input.shape} and {target.shape}"
        )
    if target.dtype.category != 1:
        raise DTypeError(f"cross_entropy: target must be an integer tensor of class indices, got {target.dtype.name}")
    if input.ndim > 2:  # (N, C, d1, ...) -> (N*d1*..., C)
        c = input.shape[1]
        perm = (0,) + tuple(range(2, input.ndim)) + (1,)
        input = input.permute(*perm).reshape(-1, c)
        target = target.reshape(-1)
    if input.ndim != 2:
        raise ShapeError(f"cross_entropy: expected logits (N, C), got {input.shape}")
    logp = log_softmax(input, 1)
    if label_smoothing:
        nll = nll_loss(logp, target, "none", ignore_index)
        smooth = -logp.mean(1) * (target != ignore_index).to(logp.dtype)
        losses = (1 - label_smoothing) * nll + label_smoothing * smooth
        if reduction == "none":
            return losses
        if reduction == "sum":
            return losses.sum()
        return losses.sum() / (target != ignore_index).to(logp.dtype).sum()
    return nll_loss(logp, target, reduction, ignore_index)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    if input.shape != target.shape:
        raise ShapeError(f"mse_loss: input shape {input.shape} and target shape {target.shape} differ")
    d = input - target
    sq = d * d
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    if reduction == "none":
        return sq
    raise ValueError(f"mse_loss: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``; x (..., in), weight (out, in), bias (out,)."""
    if x.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: input shape {x.shape} does not fit weight shape {weight.shape}")
    y = x @ weight.T
    y = y + bias if bias is not None else y
    if x.ndim == 2 and weight.ndim == 2 and x.dtype.is_floating_point:
        return mark(y, "Gemm", (x, weight, bias), transB=1)
    return y


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    if not training or p == 0:
        return x
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    keep = rand(*x.shape, dtype=x.dtype, device=x.device) >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}  # -> NumPy


def pad(input: Tensor, pad, mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions, as ``torch.nn.functional.pad``.

    ``pad`` lists (before, after) pairs from the last dimension backwards:
    ``(left, right, top, bottom, ...)``; sizes must be non-negative. Modes: ``constant`` (filled
    with ``value``), ``reflect`` (mirrored without the edge; each pad smaller than the size),
    ``replicate`` (the edge repeated) and ``circular`` (wrapped; each pad at most the size).
    Non-constant modes gather along each padded axis, so their VJP sums the gradient of
    repeated elements. Raises ValueError for a bad ``pad`` or mode.
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim or any(p < 0 for p in pad):
        raise ValueError(
            f"pad: expected an even number of non-negative sizes for at most {input.ndim} dims "
            f"(input {input.shape}), got {pad}"
        )
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    pairs = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        pairs[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        y = input._pad(tuple(pairs))
        if value != 0:  # where, not y + mask * value: 0 * inf would be NaN inside
            border = np.pad(np.zeros(input.shape, dtype=bool), pairs, constant_values=True)
            y = where(Tensor(border).to(input.device), value, y)
    else:
        y = input
        for axis, (before, after) in enumerate(pairs):
            if before or after:
                n = input.shape[axis]
                limit = n - 1 if mode == "reflect" else (n if mode == "circular" else None)
                if limit is not None and max(before, after) > limit:
                    raise ValueError(
                        f"pad: {mode} padding of {(before, after)} is too large for dimension {axis} of "
                        f"size {n} (input {input.shape})"
                    )
                idx = np.pad(np.arange(n), (before, after), mode=_PAD_MODES[mode])
                y = y.index_select(axis, Tensor(idx).to(input.device))
    pads_onnx = Tensor(np.array([b for b, _ in pairs] + [a for _, a in pairs], dtype=np.int64))
    onnx_mode = {"replicate": "edge"}.get(mode, mode)
    if mode == "circular":
        return mark(y, "Pad", (input, pads_onnx), min_opset=19, mode="wrap")
    return mark(y, "Pad", (input, pads_onnx, Tensor(np.array(value, dtype=input.dtype.np))), mode=onnx_mode)


def layer_norm(x: Tensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    n = len(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else 1
    axes = tuple(range(x.ndim - n, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(axes, keepdim=True)
    y = xc * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    if weight is not None and weight.shape == x.shape[x.ndim - n :]:
        return mark(y, "LayerNormalization", (x, weight, bias), min_opset=17, axis=-n, epsilon=eps)
    return y


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the integer ``input`` (any
    shape); the result has shape ``input.shape + (embedding_dim,)``. The VJP is a scatter-add
    into ``weight``'s rows; the row ``padding_idx`` gets no gradient (PyTorch's rule).

    Raises DTypeError for a non-integer index and IndexError for an index out of range
    (at the op when the index is already computed, else when the plan runs).
    """
    if not isinstance(input, Tensor):
        input = Tensor(np.asarray(input))  # keep the dtype: float indices are refused, not truncated
    if input.dtype.category != 1:
        raise DTypeError(f"embedding: indices must be int32 or int64, got {input.dtype.name}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    if input.dtype is not dt.int64:
        input = input.long()
    check_index_bounds("embedding", input, weight.shape, 0)
    flat = input.reshape(-1)
    rows = weight.index_select(0, flat)
    if padding_idx is not None and not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for {weight.shape[0]} embeddings")
    if padding_idx is not None and weight.requires_grad:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        rows = where((flat == padding_idx).unsqueeze(1), weight.detach().index_select(0, flat), rows)
    return mark(rows.reshape(*input.shape, weight.shape[1]), "Gather", (weight, input), axis=0)


_causal_masks: dict = {}


def _causal_mask(L: int, S: int, device: str = "cpu") -> Tensor:
    """(L, S) bool, True where query i may attend to key j (j <= i; top-left aligned, as PyTorch).

    One realized tensor per shape and device, so every step reads the same input and keeps one plan."""
    m = _causal_masks.get((L, S, device))
    if m is None:
        m = _causal_masks[(L, S, device)] = band_mask(L, S, device=device)
    return m


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` (Vaswani et al. 2017; PyTorch's function).

    Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); leading
    dimensions broadcast (e.g. (B, H, T, D)). ``scale`` defaults to ``1/sqrt(E)``.
    ``attn_mask``: bool (True = may attend) or float (added to the scores), broadcastable
    to (..., L, S). ``is_causal``: key j is visible to query i when j <= i. ``dropout_p``
    drops attention weights (always, as PyTorch's function does: pass 0 in eval).

    Raises ShapeError on mismatched shapes and ValueError when both ``attn_mask`` and
    ``is_causal`` are given.
    """
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError(
            f"scaled_dot_product_attention: query, key and value need at least 2 dims, got "
            f"{query.shape}, {key.shape}, {value.shape}"
        )
    L, E = query.shape[-2:]
    S = key.shape[-2]
    if key.shape[-1] != E or value.shape[-2] != S:
        raise ShapeError(
            f"scaled_dot_product_attention: expected query (..., L, E), key (..., S, E), value "
            f"(..., S, Ev); got {query.shape}, {key.shape}, {value.shape}"
        )
    try:
        batch = broadcast_shapes(broadcast_shapes(query.shape[:-2], key.shape[:-2]), value.shape[:-2])
    except ShapeError:
        raise ShapeError(
            f"scaled_dot_product_attention: the batch dimensions of query {query.shape}, key "
            f"{key.shape} and value {value.shape} do not broadcast together"
        ) from None
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    scores = (query @ key.transpose(-2, -1)) * (1.0 / math.sqrt(E) if scale is None else scale)
    if is_causal:
        scores = where(_causal_mask(L, S, scores.device), scores, -math.inf)
    elif attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            attn_mask = Tensor(np.asarray(attn_mask)).to(scores.device)
        scores_shape = batch + (L, S)
        try:
            fits = broadcast_shapes(attn_mask.shape, scores_shape) == scores_shape
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(
                f"scaled_dot_product_attention: attn_mask of shape {attn_mask.shape} does not "
                f"broadcast to the scores' shape {scores_shape}"
            )
        if attn_mask.dtype.category == 1:
            raise DTypeError(
                f"scaled_dot_product_attention: attn_mask must be bool or floating point, got {attn_mask.dtype.name}"
            )
        if attn_mask.dtype is dt.bool_:
            scores = where(attn_mask, scores, -math.inf)
        else:
            scores = scores + attn_mask.to(scores.dtype)
    attn = softmax(scores, -1)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p)
    return attn @ value


# ================================================================= vision: convolution, pooling, batch norm


def _pair(value, name: str, what: str) -> tuple:
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) for v in pair):
        raise ValueError(f"{name}: {what} must be an int or a pair of ints, got {value!r}")
    return int(pair[0]), int(pair[1])


def _out_size(name: str, size: int, kernel: int, stride: int, dilation: int, shape: tuple) -> int:
    span = dilation * (kernel - 1) + 1
    if span > size:
        raise ShapeError(f"{name}: kernel extent {span} is larger than the padded input size {size} (input {shape})")
    return (size - span) // stride + 1


def _windows(x: Tensor, kernel: tuple, stride: tuple, dilation: tuple, out_hw: tuple) -> list:
    """The kH*kW strided views of the (padded) x (N, C, H, W), each (N, C, oH, oW), row-major over the
    kernel: window (i, j) holds x[:, :, i*dH + sH*oh, j*dW + sW*ow]."""
    n, c = x.shape[:2]
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    views = []
    for i in range(kh):
        for j in range(kw):
            h0, w0 = i * dh, j * dw
            stops = (n, c, h0 + (oh - 1) * sh + 1, w0 + (ow - 1) * sw + 1)
            views.append(x._slice((0, 0, h0, w0), stops, (1, 1, sh, sw)))
    return views


def _check_4d(name: str, x: Tensor) -> None:
    if x.ndim != 4:
        raise ShapeError(f"{name}: expected input (N, C, H, W), got shape {x.shape}")


def conv2d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``.

    input (N, C, H, W), weight (O, C/groups, kH, kW), bias (O,) -> (N, O, oH, oW) with
    oH = (H + 2*pH - dH*(kH-1) - 1) // sH + 1 (likewise oW). The convolution is one primitive
    (lazyvic/ops/conv.py: im2col and a BLAS product; its VJP is written with conv2d itself);
    the bias is an elementwise add that fuses with what follows. ``padding`` is an int or a
    pair (no string modes). Raises ShapeError naming conv2d when channels, groups or kernel
    size do not fit the input.
    """
    _check_4d("conv2d", input)
    stride, padding = _pair(stride, "conv2d", "stride"), _pair(padding, "conv2d", "padding")
    dilation = _pair(dilation, "conv2d", "dilation")
    if weight.ndim != 4:
        raise ShapeError(f"conv2d: expected weight (O, C/groups, kH, kW), got shape {weight.shape}")
    n, c, h, w = input.shape
    o, cg, kh, kw = weight.shape
    if groups < 1 or c % groups or o % groups:
        raise ShapeError(
            f"conv2d: groups={groups} must divide input channels {c} and output channels {o} "
            f"(input {input.shape}, weight {weight.shape})"
        )
    if cg * groups != c:
        raise ShapeError(
            f"conv2d: input {input.shape} has {c} channels, weight {weight.shape} expects "
            f"{cg * groups} (C/groups={cg}, groups={groups})"
        )
    if bias is not None and bias.shape != (o,):
        raise ShapeError(f"conv2d: bias shape {bias.shape} does not fit weight shape {weight.shape}")
    _out_size("conv2d", h + 2 * padding[0], kh, stride[0], dilation[0], input.shape)
    _out_size("conv2d", w + 2 * padding[1], kw, stride[1], dilation[1], input.shape)
    input, weight = autocast_operands(input, weight)
    y = Tensor.apply(
        "conv2d",
        input,
        weight,
        stride=stride,
        padding=(padding[0], padding[0], padding[1], padding[1]),
        dilation=dilation,
        groups=groups,
    )
    if bias is not None:
        b = bias.reshape(1, o, 1, 1)
        # The add recorded directly (the generic broadcasting path cost 2.5 us more per call:
        # 50 us of a 1.1 ms ResNet-18 forward at batch 1); mixed dtypes take the generic path.
        y = Tensor.apply("add", y, Tensor.apply("expand", b, shape=y.shape)) if b.dtype is y.dtype else y + b
    return mark(
        y,
        "Conv",
        (input, weight, bias),
        kernel_shape=[kh, kw],
        strides=list(stride),
        pads=[padding[0], padding[1], padding[0], padding[1]],
        dilations=list(dilation),
        group=groups,
    )


def _pool_args(name: str, x: Tensor, kernel_size, stride, padding) -> tuple:
    _check_4d(name, x)
    kernel = _pair(kernel_size, name, "kernel_size")
    stride = kernel if stride is None or stride == [] else _pair(stride, name, "stride")
    padding = _pair(padding, name, "padding")
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{name}: padding {padding} must be at most half of kernel_size {kernel}")
    hp, wp = x.shape[2] + 2 * padding[0], x.shape[3] + 2 * padding[1]
    out_hw = (
        _out_size(name, hp, kernel[0], stride[0], 1, x.shape),
        _out_size(name, wp, kernel[1], stride[1], 1, x.shape),
    )
    return kernel, stride, padding, out_hw


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    """Maximum over kH x kW windows, as ``torch.nn.functional.max_pool2d`` (no dilation, ceil_mode or
    indices). input (N, C, H, W) -> (N, C, oH, oW); ``stride`` defaults to ``kernel_size``; the
    implicit padding is -inf. Gradients go to the window maximum (split between exact ties)."""
    kernel, stride, padding, out_hw = _pool_args("max_pool2d", input, kernel_size, stride, padding)
    y = Tensor.apply("max_pool2d", input, kernel=kernel, stride=stride, padding=padding)  # lazyvic/ops/pool.py
    return mark(
        y,
        "MaxPool",
        (input,),
        kernel_shape=list(kernel),
        strides=list(stride),
        pads=[padding[0], padding[1], padding[0], padding[1]],
    )


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, count_include_pad: bool = True) -> Tensor:
    """Mean over kH x kW windows, as ``torch.nn.functional.avg_pool2d`` (no ceil_mode or divisor_override).
    input (N, C, H, W) -> (N, C, oH, oW); the zero padding counts in the divisor when
    ``count_include_pad``, else each window is divided by its number of input elements."""
    kernel, stride, padding, out_hw = _pool_args("avg_pool2d", input, kernel_size, stride, padding)
    pads = ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1]))
    total = stack(_windows(input._pad(pads), kernel, stride, (1, 1), out_hw), dim=0).sum(0)
    onnx_attrs = dict(
        kernel_shape=list(kernel),
        strides=list(stride),
        count_include_pad=int(count_include_pad),
        pads=[padding[0], padding[1], padding[0], padding[1]],
    )
    if count_include_pad or padding == (0, 0):
        return mark(total * (1.0 / (kernel[0] * kernel[1])), "AveragePool", (input,), **onnx_attrs)
    inside = np.pad(np.ones(input.shape[2:]), pads[2:])
    (kh, kw), (sh, sw) = kernel, stride
    count = sum(
        inside[i : i + (out_hw[0] - 1) * sh + 1 : sh, j : j + (out_hw[1] - 1) * sw + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    )
    divisor = Tensor((1.0 / count).astype(input.dtype.np)).to(input.device)
    return mark(total * divisor, "AveragePool", (input,), **onnx_attrs)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows: output cell i of an axis of size n averages
    [floor(i*n/o), ceil((i+1)*n/o)). input (N, C, H, W) -> (N, C, oH, oW); an entry of
    ``output_size`` may be None (keep that size)."""
    _check_4d("adaptive_avg_pool2d", input)
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    if len(sizes) != 2:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got {output_size!r}")
    y = input
    for axis, o in zip((2, 3), sizes):
        n = input.shape[axis]
        o = n if o is None else int(o)
        if o < 1:
            raise ShapeError(f"adaptive_avg_pool2d: output size {output_size} must be positive")
        if o == n:
            continue
        # Windows of one axis at a time: the mean over a rectangle is the mean of the row means.
        cells = [
            y.narrow(axis, (i * n) // o, -(-((i + 1) * n) // o) - (i * n) // o).mean(axis, keepdim=True)
            for i in range(o)
        ]
        y = cells[0] if o == 1 else cat(cells, axis)
    if y.shape[2:] == (1, 1):
        return mark(y, "GlobalAveragePool", (input,))
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


__all__ = [
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "leaky_relu",
    "softmax",
    "log_softmax",
    "one_hot",
    "nll_loss",
    "cross_entropy",
    "mse_loss",
    "linear",
    "dropout",
    "pad",
    "layer_norm",
    "embedding",
    "scaled_dot_product_attention",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "batch_norm",
]
