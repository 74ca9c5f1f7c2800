"""Normalization modules: BatchNorm1d/2d/3d, SyncBatchNorm, LayerNorm, RMSNorm, GroupNorm,
InstanceNorm1d/2d/3d, LocalResponseNorm.

PyTorch's parameter and buffer names (``weight``, ``bias``, ``running_mean``, ``running_var``,
``num_batches_tracked``) and initial values (ones, zeros, zeros, ones, 0), so state_dicts load
both ways.
"""

from __future__ import annotations

import warnings

from lazyvic import dtypes, modes
from lazyvic import functional as F
from lazyvic.creation import ones, zeros
from lazyvic.distributed import process_group
from lazyvic.errors import ShapeError, UnsupportedOpError
from lazyvic.functional.normalization import rms_norm
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor


def _affine_parameters(module: Module, shape: tuple, affine: bool, bias: bool, dtype, device) -> None:
    """``module.weight`` (ones) and ``module.bias`` (zeros) of ``shape`` when ``affine`` (no bias
    without ``bias``); registered as None otherwise, as PyTorch's norm layers do."""
    module.register_parameter("weight", Parameter(ones(*shape, dtype=dtype, device=device)) if affine else None)
    module.register_parameter("bias", Parameter(zeros(*shape, dtype=dtype, device=device)) if affine and bias else None)


class _NormBase(Module):
    """The parameters and running statistics that batch and instance norm share."""

    def __init__(self, num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine_parameters(self, (num_features,), affine, bias, dtype, device)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype=dtypes.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with modes.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class _BatchNorm(_NormBase):
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
        device=None,
        dtype=None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    _ranks: tuple = ()
    _layout: str = ""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._ranks or x.shape[1] != self.num_features:
            layout = self._layout.replace("C", str(self.num_features))
            raise ShapeError(f"{type(self).__name__}: expected input {layout}, got {x.shape}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with modes.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        # Without running statistics even evaluation normalizes with the batch's, as in PyTorch.
        use_batch_stats = self.training or self.running_mean is None
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, use_batch_stats, momentum, self.eps
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


class LayerNorm(Module):
    """Layer normalization over the last ``len(normalized_shape)`` axes (``F.layer_norm``); parameters
    ``weight`` (ones) and ``bias`` (zeros) of ``normalized_shape`` when ``elementwise_affine``."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, dtype, device)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(Module):
    """Root mean square normalization over the last ``len(normalized_shape)`` axes
    (``F.rms_norm``), as ``torch.nn.RMSNorm``: parameter ``weight`` (ones) of ``normalized_shape``
    when ``elementwise_affine``, else None; ``eps`` None means the input dtype's machine epsilon."""

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        weight = ones(*self.normalized_shape, dtype=dtype, device=device) if elementwise_affine else None
        self.register_parameter("weight", Parameter(weight) if elementwise_affine else None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            with modes.no_grad():
                self.weight.fill_(1.0)

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """Group normalization (``F.group_norm``): input (N, num_channels, ...); parameters ``weight``
    (ones) and ``bias`` (zeros) of (num_channels,) when ``affine``. Raises ValueError when
    ``num_groups`` does not divide ``num_channels``."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _affine_parameters(self, (num_channels,), affine, bias, dtype, device)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(_NormBase):
    """Instance normalization (``F.instance_norm``) of (N, C, *spatial) or unbatched (C, *spatial)
    inputs; subclasses fix the number of spatial axes. Defaults as PyTorch: no affine parameters and
    no running statistics; with ``track_running_stats`` evaluation normalizes with them."""

    _spatial = 1

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias)

    def forward(self, input: Tensor) -> Tensor:
        name, s = type(self).__name__, self._spatial
        if input.ndim not in (s + 1, s + 2):
            raise ShapeError(
                f"{name}: expected a {s + 2}-D (N, C, *spatial) or {s + 1}-D (C, *spatial) input, got shape {input.shape}"
            )
        c = input.shape[input.ndim - s - 1]
        if c != self.num_features:
            if self.affine or self.track_running_stats:
                raise ShapeError(
                    f"{name}: expected {self.num_features} channels (num_features) at axis "
                    f"{input.ndim - s - 1} of input {input.shape}, got {c}"
                )
            warnings.warn(
                f"{name}: input's size at dim={input.ndim - s - 1} does not match num_features. You can silence "
                "this warning by not passing in num_features, which is not used because affine=False",
                stacklevel=2,
            )
        unbatched = input.ndim == s + 1
        x = input.unsqueeze(0) if unbatched else input
        y = F.instance_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization of (N, C, L) or (C, L) over L."""

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization of (N, C, H, W) or (C, H, W) over (H, W)."""

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization of (N, C, D, H, W) or (C, D, H, W) over (D, H, W)."""

    _spatial = 3


class LocalResponseNorm(Module):
    """Local response normalization across channels (``F.local_response_norm``; Krizhevsky et al.
    2012): ``x / (k + alpha * mean of x**2 over size neighbouring channels) ** beta``. Input
    (N, C, *) of 3 or more axes. No parameters."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm`` in one process: batch normalization over every axis but 1 of
    (N, C, *) inputs, exactly :class:`BatchNorm1d`/``2d``/``3d`` (the statistics of one process
    are the whole batch's). Parameters and buffers have PyTorch's names, so state_dicts load both
    ways. ``process_group`` is kept and unused.

    Raises:
        ShapeError: an input of fewer than 2 axes or with another number of channels.
        UnsupportedOpError: training while a ``lazyvic.distributed`` process group of more than
            one process is initialized (the statistics would not be synchronized across them).
    """

    _ranks, _layout = (2, 3, 4, 5, 6, 7, 8), "(N, C, *)"

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.process_group = process_group

    def forward(self, x: Tensor) -> Tensor:
        if self.training and process_group.is_initialized() and process_group.get_world_size(self.process_group) > 1:
            raise UnsupportedOpError(
                "SyncBatchNorm: synchronizing batch statistics across "
                f"{process_group.get_world_size(self.process_group)} processes is not supported; "
                "use BatchNorm (per-process statistics) or evaluation mode"
            )
        return super().forward(x)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """``module`` with every BatchNorm1d/2d/3d inside (or itself) replaced by a SyncBatchNorm
        that shares its parameters and buffers and keeps its training flag, as PyTorch's
        classmethod; other modules are returned as they are, with their children converted."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
            )
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out
