"""``lazyvic.distributions``: the most used of PyTorch's ``torch.distributions``.

``Normal``, ``Uniform``, ``Bernoulli`` and ``Categorical`` with PyTorch's names and shapes:
``sample(sample_shape)`` (no gradient), ``rsample`` (reparameterized: gradients reach the
parameters) for the continuous ones, ``log_prob``, ``entropy``, ``mean``, ``variance``,
``stddev``, ``batch_shape`` / ``event_shape``; ``kl_divergence`` for the pairs of one family
(and ``register_kl`` for more). Every value is a lazy tensor expression of the parameters, so a
loss built from ``log_prob`` or ``kl_divergence`` (a VAE's KL term, a policy gradient's
``log_prob * advantage``) is recorded and fused like any other op; draws come from lazyvic's
seeded generator (``lazyvic.manual_seed``).

Differences from PyTorch: arguments are not validated by default (checking ``scale > 0``
would read the parameters, a sync point at every construction); ``validate_args=True``
checks realized parameters and raises ValueError. Formulas: the closed forms of PyTorch's
``torch/distributions/{normal,uniform,bernoulli,categorical,kl}.py`` (Normal log-density and
entropy, the Bernoulli and categorical cross-entropies, the KL divergences of two normals,
two Bernoullis, two categoricals).
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ShapeError
from lazyvic.functional.loss import binary_cross_entropy_with_logits
from lazyvic.functions import logsumexp
from lazyvic.modes import no_grad
from lazyvic.random import bernoulli, multinomial, rand, randn
from lazyvic.shapes import broadcast_shapes
from lazyvic.tensor import Tensor, where

__all__ = ["Distribution", "Normal", "Uniform", "Bernoulli", "Categorical", "kl_divergence", "register_kl"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    d = like.dtype if like is not None and like.dtype.is_floating_point else dt.default_float
    return Tensor(np.asarray(x, dtype=d.np), dtype=d)


def _size(sample_shape) -> tuple:
    return (int(sample_shape),) if isinstance(sample_shape, (int, np.integer)) else tuple(int(s) for s in sample_shape)


class Distribution:
    """The base class: ``batch_shape``, ``event_shape``, ``sample`` from ``rsample`` without
    gradient, ``stddev`` from ``variance``."""

    has_rsample = False

    def __init__(self, batch_shape: tuple = (), event_shape: tuple = (), validate_args: bool | None = None):
        self.batch_shape, self.event_shape = tuple(batch_shape), tuple(event_shape)
        self._validate = bool(validate_args)

    def _extended(self, sample_shape) -> tuple:
        return _size(sample_shape) + self.batch_shape + self.event_shape

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterized sample (rsample)")

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def _check(self, ok, what: str) -> None:
        """With ``validate_args``: raise ValueError unless every element of ``ok`` holds."""
        if self._validate and not bool(ok.all()):
            raise ValueError(f"{type(self).__name__}: expected {what}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={self.batch_shape}, event_shape={self.event_shape})"


class Normal(Distribution):
    """N(loc, scale**2), elementwise; ``loc`` and ``scale`` broadcast to the batch shape."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None):
        self.loc = _tensor(loc)
        self.scale = _tensor(scale, self.loc)
        shape = broadcast_shapes(self.loc.shape, self.scale.shape)
        self.loc, self.scale = self.loc.expand(*shape), self.scale.expand(*shape)
        super().__init__(shape, (), validate_args)
        self._check(self.scale > 0, "scale > 0")

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale

    def rsample(self, sample_shape=()) -> Tensor:
        eps = randn(*self._extended(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value) -> Tensor:
        """``-(x - loc)**2 / (2 scale**2) - log(scale) - log(sqrt(2 pi))``."""
        v = _tensor(value, self.loc)
        return -((v - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value) -> Tensor:
        v = _tensor(value, self.loc)
        return 0.5 * (1 + ((v - self.loc) / (self.scale * math.sqrt(2))).erf())

    def entropy(self) -> Tensor:
        return 0.5 + _LOG_SQRT_2PI + self.scale.log()


class Uniform(Distribution):
    """U[low, high), elementwise."""

    has_rsample = True

    def __init__(self, low, high, validate_args: bool | None = None):
        self.low = _tensor(low)
        self.high = _tensor(high, self.low)
        shape = broadcast_shapes(self.low.shape, self.high.shape)
        self.low, self.high = self.low.expand(*shape), self.high.expand(*shape)
        super().__init__(shape, (), validate_args)
        self._check(self.low < self.high, "low < high")

    @property
    def mean(self) -> Tensor:
        return (self.low + self.high) / 2

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()) -> Tensor:
        u = rand(*self._extended(sample_shape), dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value) -> Tensor:
        """``-log(high - low)`` inside [low, high), ``-inf`` outside."""
        v = _tensor(value, self.low)
        inside = (v >= self.low) & (v < self.high)
        return where(inside, -(self.high - self.low).log(), -math.inf)

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()


class Bernoulli(Distribution):
    """Bernoulli(probs), or of ``logits`` (log-odds); exactly one of them."""

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None):
        if (probs is None) == (logits is None):
            raise ValueError("Bernoulli: give either probs or logits, not both")
        if probs is not None:
            self.probs = _tensor(probs)
            p = self.probs.clamp(1e-12 if self.probs.dtype is dt.float64 else 1e-7, 1 - 1e-7)
            self.logits = p.log() - (-p).log1p()
        else:
            self.logits = _tensor(logits)
            self.probs = self.logits.sigmoid()
        super().__init__(self.probs.shape, (), validate_args)
        if probs is not None:
            self._check((self.probs >= 0) & (self.probs <= 1), "probs in [0, 1]")

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            p = self.probs.expand(*self._extended(sample_shape))
            return bernoulli(p)

    def log_prob(self, value) -> Tensor:
        """``-BCEWithLogits(logits, value)``, elementwise."""
        v = _tensor(value, self.logits)
        shape = broadcast_shapes(self.logits.shape, v.shape)
        return -binary_cross_entropy_with_logits(self.logits.expand(*shape), v.expand(*shape), reduction="none")

    def entropy(self) -> Tensor:
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")


class Categorical(Distribution):
    """A categorical over the last axis of ``probs`` (normalized here) or ``logits``
    (unnormalized log-probabilities); exactly one of them. batch_shape: all but the last axis."""

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None):
        if (probs is None) == (logits is None):
            raise ValueError("Categorical: give either probs or logits, not both")
        if probs is not None:
            p = _tensor(probs)
            if p.ndim < 1:
                raise ShapeError(f"Categorical: probs must have at least one axis, got shape {p.shape}")
            self.probs = p / p.sum(-1, keepdim=True)
            self.logits = self.probs.clamp(min=dt.finfo(self.probs.dtype).tiny).log()
        else:
            lg = _tensor(logits)
            if lg.ndim < 1:
                raise ShapeError(f"Categorical: logits must have at least one axis, got shape {lg.shape}")
            self.logits = lg - logsumexp(lg, -1, keepdim=True)
            self.probs = self.logits.exp()
        super().__init__(self.probs.shape[:-1], (), validate_args)
        if probs is not None:
            self._check(p >= 0, "probs >= 0")

    @property
    def num_categories(self) -> int:
        return self.probs.shape[-1]

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError("Categorical: the mean of a category is undefined (PyTorch: nan)")

    def sample(self, sample_shape=()) -> Tensor:
        """int64 categories of shape sample_shape + batch_shape (``lazyvic.multinomial``)."""
        n = int(np.prod(_size(sample_shape), dtype=np.int64))
        with no_grad():
            rows = self.probs.reshape(-1, self.num_categories)
            draws = multinomial(rows, n, replacement=True)  # (batch, n)
            return draws.T.reshape(*_size(sample_shape), *self.batch_shape)

    def log_prob(self, value) -> Tensor:
        """The normalized log-probability of each category in ``value`` (int64)."""
        v = value if isinstance(value, Tensor) else Tensor(np.asarray(value, dtype=np.int64))
        shape = broadcast_shapes(v.shape, self.batch_shape)
        logits = self.logits.expand(*shape, self.num_categories)
        return logits.gather(-1, v.to(dt.int64).expand(*shape).unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> Tensor:
        """``-sum(p * log p)`` over categories (0 * log 0 counted as 0, as PyTorch)."""
        lg = self.logits.clamp(min=dt.finfo(self.logits.dtype).min)
        return -(lg * self.probs).sum(-1)


# -------------------------------------------------------------------- KL divergences
_KL: dict = {}


def register_kl(type_p, type_q):
    """Decorator registering ``fn(p, q)`` as the KL divergence of ``type_p`` to ``type_q``."""

    def deco(fn):
        _KL[(type_p, type_q)] = fn
        return fn

    return deco


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q), elementwise over the batch shape. Raises NotImplementedError for a pair with
    no registered formula."""
    for (tp, tq), fn in _KL.items():
        if isinstance(p, tp) and isinstance(q, tq):
            return fn(p, q)
    raise NotImplementedError(f"kl_divergence: no formula for {type(p).__name__} to {type(q).__name__}")


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    # p log(p / q) + (1 - p) log((1 - p) / (1 - q)), each log from the logits:
    # BCEWithLogits(l, 1) = -log(sigmoid(l)), BCEWithLogits(l, 0) = -log(1 - sigmoid(l)).
    shape = broadcast_shapes(p.logits.shape, q.logits.shape)
    lp, lq, pp = p.logits.expand(*shape), q.logits.expand(*shape), p.probs.expand(*shape)
    one, zero = pp.new_ones(*shape), pp.new_zeros(*shape)

    def bce(logits, target):
        return binary_cross_entropy_with_logits(logits, target, reduction="none")

    return pp * (bce(lq, one) - bce(lp, one)) + (1 - pp) * (bce(lq, zero) - bce(lp, zero))


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    t = p.probs * (p.logits - q.logits)
    t = where(p.probs == 0, 0.0, t)
    return t.sum(-1)
