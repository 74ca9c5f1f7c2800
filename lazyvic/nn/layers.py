"""Containers and basic layers (PyTorch's names, arguments and initializations): Linear, Sequential,
ModuleList, ModuleDict, ParameterList, ParameterDict, Embedding, Identity, Flatten, Unflatten,
Dropout, Dropout1d/2d/3d."""

from __future__ import annotations

import math
import operator
from collections import OrderedDict

import numpy as np

from lazyvic import functional as F
from lazyvic import modes
from lazyvic.creation import empty
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.nn import init
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor, where


class Linear(Module):
    """``y = x @ W.T + b``; x (..., in_features) -> (..., out_features).

    Initialization as PyTorch: W ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with
    a = sqrt(5)), b ~ U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
            init.uniform_(self.bias, -bound, bound)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ShapeError(f"Linear: expected input (..., {self.in_features}), got {x.shape}")
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y = x1^T A x2 + b`` per output feature (``F.bilinear``); x1 (..., in1_features), x2 (...,
    in2_features) -> (..., out_features). Initialization as PyTorch: weight (out, in1, in2) and
    bias (out,) ~ U(-1/sqrt(in1), 1/sqrt(in1))."""

    def __init__(
        self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None, dtype=None
    ):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        bound = 1.0 / math.sqrt(in1_features) if in1_features > 0 else 0.0
        self.weight = Parameter(empty(out_features, in1_features, in2_features, dtype=dtype, device=device))
        init.uniform_(self.weight, -bound, bound)
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
            init.uniform_(self.bias, -bound, bound)
        else:
            self.register_parameter("bias", None)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )


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


def _set_entry(container: Module, key: str, value) -> None:
    """Store ``value`` under ``key``: a Tensor that is not a Parameter becomes one (sharing its
    value), as PyTorch's parameter containers do; other objects are kept as plain attributes. A
    parameter that replaces one keeps its place (its state_dict position), as in PyTorch."""
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        value = Parameter(value)
    params = container._parameters
    if key in params and (value is None or isinstance(value, Parameter)):
        params[key] = value
    else:
        setattr(container, key, value)


class ParameterList(Module):
    """A list of parameters registered as ``"0"``, ``"1"``, ... (PyTorch's state_dict keys), as
    ``torch.nn.ParameterList``: tensors are wrapped in Parameters; other objects are kept as
    plain attributes of those names (not parameters). Supports ``append``, ``extend``, ``+=``,
    indexing (negative, slices), assignment, ``len`` and iteration.

    Raises IndexError for an index out of range, DTypeError (a TypeError) when ``extend`` gets a
    non-iterable or a single tensor.
    """

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def _key(self, idx) -> str:
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise LIndexError(f"ParameterList: index {idx} is out of range for a list of {len(self)}")
        return str(idx % len(self))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(self[i] for i in range(*idx.indices(len(self))))
        return getattr(self, self._key(idx))

    def __setitem__(self, idx, value) -> None:
        _set_entry(self, self._key(idx), value)

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values) -> "ParameterList":
        return self.extend(values)

    def append(self, value) -> "ParameterList":
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values) -> "ParameterList":
        if isinstance(values, Tensor) or not hasattr(values, "__iter__"):
            raise DTypeError(f"ParameterList.extend should be called with an iterable, but got {type(values).__name__}")
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): {_describe(p)}" for k, p in enumerate(self))

    def forward(self, *args, **kwargs):
        raise ArgumentError("ParameterList should not be called; index or iterate over it")


class ParameterDict(Module):
    """Parameters by string key, in insertion order, as ``torch.nn.ParameterDict``: registered
    under their keys (PyTorch's state_dict keys); tensors are wrapped in Parameters, other objects
    kept as they are. Supports ``d[key]``, ``d[key] = value``, ``del d[key]``, ``in``, ``len``,
    iteration over keys, ``keys``, ``values``, ``items``, ``get``, ``pop``, ``setdefault``,
    ``update``, ``clear`` and ``copy``.

    Raises DTypeError (a TypeError) for a key that is not a string, KeyError for a missing key.
    """

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    def _attr(self, key) -> str:
        if not isinstance(key, str):
            raise DTypeError(f"ParameterDict: keys must be strings, got {type(key).__name__} ({key!r})")
        return key

    def __getitem__(self, key: str):
        if key not in self._keys:
            raise KeyError(key)
        d = self.__dict__  # not getattr: a key may be a method's name ("keys", "pop")
        return d["_parameters"][key] if key in d["_parameters"] else d[key]

    def __setitem__(self, key: str, value) -> None:
        attr = self._attr(key)
        self._keys[key] = None
        _set_entry(self, attr, value)

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def keys(self):
        return self._keys.keys()

    def values(self):
        return (self[k] for k in self._keys)

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def get(self, key: str, default=None):
        return self[key] if key in self._keys else default

    def pop(self, key: str):
        value = self[key]
        del self[key]
        return value

    def setdefault(self, key: str, default=None):
        if key not in self._keys:
            self[key] = default
        return self[key]

    def update(self, parameters) -> None:
        """Set each (key, value) of a mapping or ParameterDict (in its order) or of an iterable of
        pairs."""
        pairs = parameters.items() if hasattr(parameters, "items") else parameters
        for pair in pairs:
            if len(pair) != 2:
                raise ArgumentError(f"ParameterDict.update: expected (key, value) pairs, got one of length {len(pair)}")
            self[pair[0]] = pair[1]

    def clear(self) -> None:
        for k in list(self._keys):
            del self[k]

    def copy(self) -> "ParameterDict":
        return ParameterDict(OrderedDict(self.items()))

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): {_describe(p)}" for k, p in self.items())

    def forward(self, *args, **kwargs):
        raise ArgumentError("ParameterDict should not be called; index it by key")


def _describe(p) -> str:
    if isinstance(p, Tensor):
        kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
        return f"{kind} containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]"
    return f"Object of type: {type(p).__name__}"


class Embedding(Module):
    """A lookup table: integer indices (any shape) -> rows of ``weight`` (num_embeddings,
    embedding_dim); output shape ``input.shape + (embedding_dim,)`` (see ``F.embedding`` for
    ``max_norm``, ``norm_type``, ``scale_grad_by_freq`` and ``sparse``).

    Initialization as PyTorch: N(0, 1), with the ``padding_idx`` row zeroed (that row
    also gets no gradient); ``_weight`` gives the initial table instead (not zeroed), and
    ``_freeze=True`` makes it a parameter without gradient.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Tensor | None = None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} embeddings")
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is not None:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(
                    f"Embedding: _weight shape {tuple(_weight.shape)} does not match "
                    f"({num_embeddings}, {embedding_dim})"
                )
            weight = _weight if isinstance(_weight, Tensor) else Tensor(np.asarray(_weight))
            self.weight = Parameter(weight.detach(), requires_grad=not _freeze)
            return
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device), not _freeze)
        with modes.no_grad():
            init.normal_(self.weight)
            if padding_idx is not None:
                keep = np.ones((num_embeddings, 1), dtype=bool)
                keep[padding_idx] = False
                self.weight._assign(where(Tensor(keep).to(self.weight.device), self.weight, 0.0))

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> "Embedding":
        """An Embedding whose table is ``embeddings`` (num_embeddings, embedding_dim), as
        ``torch.nn.Embedding.from_pretrained``: the table is used as given (the ``padding_idx``
        row is not zeroed, but gets no gradient), and ``freeze=True`` (default) stops its
        gradient. Raises ShapeError for a table that is not 2-D."""
        if len(getattr(embeddings, "shape", ())) != 2:
            raise ShapeError(
                f"Embedding.from_pretrained: embeddings must be 2-D (num_embeddings, embedding_dim), "
                f"got shape {tuple(getattr(embeddings, 'shape', ()))}"
            )
        rows, cols = embeddings.shape
        return cls(
            rows,
            cols,
            padding_idx=padding_idx,
            max_norm=max_norm,
            norm_type=norm_type,
            scale_grad_by_freq=scale_grad_by_freq,
            sparse=sparse,
            _weight=embeddings,
            _freeze=freeze,
        )

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        return s


class Identity(Module):
    def forward(self, x):
        return x


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings (``F.embedding_bag``): ``forward(input,
    offsets=None, per_sample_weights=None)`` -> (B, embedding_dim). Initialization as PyTorch:
    N(0, 1), the ``padding_idx`` row zeroed; ``_weight`` gives the table instead."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        table = Embedding(num_embeddings, embedding_dim, padding_idx, _weight=_weight, device=device, dtype=dtype)
        self.weight = table.weight
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, table.padding_idx
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset

    def forward(self, input: Tensor, offsets: Tensor | None = None, per_sample_weights: Tensor | None = None) -> Tensor:  # noqa: A002
        return F.embedding_bag(
            input,
            self.weight,
            offsets,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            self.mode,
            self.sparse,
            per_sample_weights,
            self.include_last_offset,
            self.padding_idx,
        )

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"


class Unfold(Module):
    """Sliding blocks as columns (``F.unfold``): (N, C, H, W) -> (N, C * kh * kw, L)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Module):
    """Columns back into an image, overlaps summed (``F.fold``): (N, C * kh * kw, L) -> (N, C, H, W)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
            f"padding={self.padding}, stride={self.stride}"
        )


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Unflatten(Module):
    """Split axis ``dim`` into ``unflattened_size`` (``Tensor.unflatten``)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)


class Dropout(Module):
    """Zero each element with probability ``p`` in training (``F.dropout``)."""

    _fn = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input: Tensor) -> Tensor:
        return self._fn(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zero whole channels of (N, C, L) or (C, L) in training (``F.dropout1d``)."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    """Zero whole channels of (N, C, H, W) or (C, H, W) in training (``F.dropout2d``)."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(Dropout):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) in training (``F.dropout3d``)."""

    _fn = staticmethod(F.dropout3d)


class AlphaDropout(Dropout):
    """Alpha dropout in training (``F.alpha_dropout``; Klambauer et al. 2017): keeps a zero-mean,
    unit-variance input's mean and variance, for SELU networks. The identity in eval mode."""

    _fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels of (N, C, *) in training (``F.feature_alpha_dropout``)."""

    _fn = staticmethod(F.feature_alpha_dropout)
