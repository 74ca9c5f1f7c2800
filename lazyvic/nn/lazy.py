"""Lazily shaped modules (PyTorch's ``LazyLinear``, ``LazyConv1d/2d/3d``): the input size is
read from the first call.

A lazy module holds :class:`UninitializedParameter` s (empty, shape (0,)) until its first call,
which gives them their shapes, initializes them as the eager module does (the same draws from
lazyvic's generator: a seeded ``LazyLinear(4)`` called on (..., 3) inputs gets the weights of
``Linear(3, 4)``), and turns the module into that eager class (``cls_to_become``), as PyTorch's
``LazyModuleMixin``. Loading a state_dict into a module that is still lazy gives its parameters
the checkpoint's shapes first.

The parameters are filled in place: an optimizer made before the first call holds the same
parameter objects, and once the first forward has run it updates them with their real shapes
(its per-parameter state is made at their first step). PyTorch's documentation asks for a dry
run (one forward) before making the optimizer; that order works here as well and is the portable
one. Before the first call the parameters are empty (shape (0,)): ``parameters()`` counts zero
elements, and ``Module.to`` casts them in place, so a ``LazyLinear(4).double()`` is made float64.
"""

from __future__ import annotations

import math

from lazyvic import modes
from lazyvic.creation import empty, zeros
from lazyvic.errors import ShapeError
from lazyvic.nn import init
from lazyvic.nn.conv import Conv1d, Conv2d, Conv3d
from lazyvic.nn.layers import Linear
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet (``torch.nn.parameter.UninitializedParameter``):
    empty until :meth:`materialize` gives it a shape, in place, and makes it a ``Parameter``."""

    __slots__ = ()
    cls_to_become = Parameter

    def __init__(self, requires_grad: bool = True, device=None, dtype=None):
        super().__init__(zeros(0, dtype=dtype, device=device), requires_grad)

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Give this parameter ``shape`` (uninitialized values of its dtype and device, or those
        given) and make it a plain ``Parameter``: the same object, so whoever holds it sees it."""
        with modes.no_grad():
            self.data = empty(*shape, dtype=dtype or self.dtype, device=device or self.device)
        self.__class__ = self.cls_to_become

    def __repr__(self) -> str:
        return "<UninitializedParameter>"

    def __deepcopy__(self, memo) -> "UninitializedParameter":
        if id(self) not in memo:
            memo[id(self)] = UninitializedParameter(self.requires_grad, self.device, self.dtype)
        return memo[id(self)]


def is_lazy(value) -> bool:
    """True for an :class:`UninitializedParameter` (PyTorch's ``torch.nn.parameter.is_lazy``)."""
    return isinstance(value, UninitializedParameter)


class LazyModuleMixin:
    """The first call of a module with uninitialized parameters runs
    ``initialize_parameters(*args, **kwargs)`` (from the inputs' shapes), then the module becomes
    ``cls_to_become``; see the module docstring."""

    cls_to_become: type | None = None

    def has_uninitialized_params(self) -> bool:
        return any(is_lazy(p) for p in self._parameters.values())

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        if self.has_uninitialized_params():
            self.initialize_parameters(*args, **kwargs)
            if self.cls_to_become is not None:
                self.__class__ = self.cls_to_become
        return Module.__call__(self, *args, **kwargs)  # self may have become cls_to_become

    def _materialize_from_state_dict(self, state_dict: dict, prefix: str) -> None:
        """Give each uninitialized parameter the shape of its entry in ``state_dict`` (called by
        ``Module.load_state_dict`` before it checks the shapes)."""
        for name, p in list(self._parameters.items()):
            value = state_dict.get(prefix + name)
            if is_lazy(p) and value is not None:
                p.materialize(tuple(value.shape))
        if not self.has_uninitialized_params() and self.cls_to_become is not None:
            self._set_sizes_from_parameters()
            self.__class__ = self.cls_to_become

    def _set_sizes_from_parameters(self) -> None:
        raise NotImplementedError


class LazyLinear(LazyModuleMixin, Linear):
    """``Linear`` whose ``in_features`` is the last size of its first input, as
    ``torch.nn.LazyLinear(out_features, bias=True)``. Becomes a :class:`Linear` at the first call
    (weight (out_features, in_features), bias (out_features,), PyTorch's initialization).

    Raises ShapeError at the first call for a 0-d input."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:
        if not isinstance(input, Tensor) or input.ndim == 0:
            raise ShapeError(f"LazyLinear: expected an input (..., in_features), got {getattr(input, 'shape', input)}")
        self.in_features = input.shape[-1]
        self.weight.materialize((self.out_features, self.in_features))
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            self.bias.materialize((self.out_features,))
            bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def _set_sizes_from_parameters(self) -> None:
        self.in_features = self.weight.shape[1]


class _LazyConvNd(LazyModuleMixin):
    def __init__(
        self,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        # The eager constructor with no channels (its initialization is skipped while lazy), then
        # uninitialized parameters in place of its empty ones.
        self.cls_to_become.__init__(
            self, 0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode, device=device, dtype=dtype
        )
        self.out_channels = out_channels
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:
        name, nd = type(self).__name__, self._nd
        if not isinstance(input, Tensor) or input.ndim not in (nd + 1, nd + 2):
            raise ShapeError(
                f"{name}: expected an input (N, C, *spatial) or (C, *spatial) with {nd} spatial axes, "
                f"got {getattr(input, 'shape', input)}"
            )
        self.in_channels = input.shape[0] if input.ndim == nd + 1 else input.shape[1]
        if self.in_channels % self.groups:
            raise ShapeError(f"{name}: in_channels {self.in_channels} must be divisible by groups={self.groups}")
        self.weight.materialize((self.out_channels, self.in_channels // self.groups, *self.kernel_size))
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))
        self.reset_parameters()

    def _set_sizes_from_parameters(self) -> None:
        self.in_channels = self.weight.shape[1] * self.groups


class LazyConv1d(_LazyConvNd, Conv1d):
    """``Conv1d`` whose ``in_channels`` is read from the first input, as ``torch.nn.LazyConv1d``
    (arguments as Conv1d without in_channels); becomes a :class:`Conv1d` at the first call."""

    cls_to_become = Conv1d


class LazyConv2d(_LazyConvNd, Conv2d):
    """``Conv2d`` whose ``in_channels`` is read from the first input, as ``torch.nn.LazyConv2d``
    (arguments as Conv2d without in_channels); becomes a :class:`Conv2d` at the first call."""

    cls_to_become = Conv2d


class LazyConv3d(_LazyConvNd, Conv3d):
    """``Conv3d`` whose ``in_channels`` is read from the first input, as ``torch.nn.LazyConv3d``
    (arguments as Conv3d without in_channels); becomes a :class:`Conv3d` at the first call."""

    cls_to_become = Conv3d


__all__ = [
    "UninitializedParameter",
    "is_lazy",
    "LazyModuleMixin",
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
]
