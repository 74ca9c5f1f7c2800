"""Layers and losses with PyTorch's names, arguments and default initializations."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from lazyvic import autograd, dtypes
from lazyvic import functional as F
from lazyvic.creation import empty, ones, zeros
from lazyvic.errors import ShapeError
from lazyvic.nn import init
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor, where


class Linear(Module):
    """``y = x @ W.T + b``; x (..., in_features) -> (..., out_features).

    Initialization as PyTorch: W ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with
    a = sqrt(5)), b ~ U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
            self.bias = Parameter(empty(out_features, dtype=dtype))
            init.uniform_(self.bias, -bound, bound)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ShapeError(f"Linear: expected input (..., {self.in_features}), got {x.shape}")
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):  # keeps the names, as PyTorch (state_dict keys stay the same)
            return Sequential(OrderedDict(list(self._modules.items())[i]))
        return mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m):
        self.add_module(str(len(self)), m)
        return self


class ModuleList(Module):
    """A list of modules registered as ``"0"``, ``"1"``, ... (PyTorch's names in state_dict keys)."""

    def __init__(self, modules=None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, m: Module) -> "ModuleList":
        self.add_module(str(len(self._modules)), m)
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        mods = list(self._modules.values())
        return ModuleList(mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward(); iterate over it")


class ModuleDict(Module):
    """Modules by name, in insertion order."""

    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            self.add_module(name, m)

    def __getitem__(self, name: str) -> Module:
        return self._modules[name]

    def __setitem__(self, name: str, m: Module) -> None:
        self.add_module(name, m)

    def __contains__(self, name: str) -> bool:
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward(); index it by name")


class Embedding(Module):
    """A lookup table: integer indices (any shape) -> rows of ``weight`` (num_embeddings,
    embedding_dim); output shape ``input.shape + (embedding_dim,)``.

    Initialization as PyTorch: N(0, 1), with the ``padding_idx`` row zeroed (that row
    also gets no gradient).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, dtype=None):
        super().__init__()
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} embeddings")
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype))
        init.normal_(self.weight)
        if padding_idx is not None:
            keep = np.ones((num_embeddings, 1), dtype=bool)
            keep[padding_idx] = False
            with autograd.no_grad():
                self.weight._assign(where(Tensor(keep), self.weight, 0.0))

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape))
            self.bias = Parameter(zeros(*self.normalized_shape))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Conv2d(Module):
    """2-D convolution: input (N, in_channels, H, W) -> (N, out_channels, oH, oW) (see ``F.conv2d``).

    Parameters ``weight`` (out_channels, in_channels/groups, kH, kW) and ``bias`` (out_channels,),
    initialized as PyTorch: kaiming_uniform_ with a = sqrt(5), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    with fan_in = in_channels/groups * kH * kW.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        dtype=None,
    ):
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"Conv2d: groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F._pair(kernel_size, "Conv2d", "kernel_size")
        self.stride = F._pair(stride, "Conv2d", "stride")
        self.padding = F._pair(padding, "Conv2d", "padding")
        self.dilation = F._pair(dilation, "Conv2d", "dilation")
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype))
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            self.bias = Parameter(empty(out_channels, dtype=dtype))
            init.uniform_(self.bias, -bound, bound)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, bias={self.bias is not None}"
        )


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _BatchNorm(Module):
    """Batch normalization over every axis but 1 (see ``F.batch_norm``); subclasses fix the ranks.

    Parameters ``weight`` (ones) and ``bias`` (zeros) when ``affine``; buffers ``running_mean``
    (zeros), ``running_var`` (ones) and ``num_batches_tracked`` (int64 0) when
    ``track_running_stats`` — PyTorch's state_dict names. ``momentum=None`` averages the running
    statistics cumulatively over the batches seen.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        dtype=None,
    ):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype))
            self.bias = Parameter(zeros(num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", zeros((), dtype=dtypes.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    _ranks: tuple = ()
    _layout: str = ""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._ranks or x.shape[1] != self.num_features:
            layout = self._layout.replace("C", str(self.num_features))
            raise ShapeError(f"{type(self).__name__}: expected input {layout}, got {x.shape}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with autograd.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        # Without running statistics even evaluation normalizes with the batch's, as in PyTorch.
        use_batch_stats = self.training or self.running_mean is None
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, use_batch_stats, momentum, self.eps
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) over (N) or (N, L), as ``torch.nn.BatchNorm1d``."""

    _ranks, _layout = (2, 3), "(N, C) or (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) over (N, H, W), as ``torch.nn.BatchNorm2d``."""

    _ranks, _layout = (4,), "(N, C, H, W)"


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) over (N, D, H, W), as ``torch.nn.BatchNorm3d``."""

    _ranks, _layout = (5,), "(N, C, D, H, W)"


class Softmax(Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)


class LogSoftmax(Softmax):
    def forward(self, x):
        return F.log_softmax(x, self.dim)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


class CrossEntropyLoss(Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0):
        super().__init__()
        self.reduction, self.ignore_index, self.label_smoothing = reduction, ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.reduction, self.ignore_index, self.label_smoothing)
