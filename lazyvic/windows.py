"""Window functions for signal processing: ``hann_window``, ``hamming_window``,
``bartlett_window``, ``blackman_window``, ``kaiser_window`` (PyTorch's names, signatures and
defaults: ``periodic=True`` gives the first ``N`` values of the symmetric window of ``N + 1``,
for spectral analysis; ``periodic=False`` the symmetric window).

Each window is computed on the host in float64 by its textbook formula (Harris, "On the use of
windows for harmonic analysis with the discrete Fourier transform", Proc. IEEE 1978) and rounded
once to ``dtype`` (PyTorch computes in ``dtype``: float32 values may differ in the last bit), then
placed on ``device`` as a realized tensor.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError
from lazyvic.tensor import Tensor
from lazyvic.transfer import device_arg, placed


def _window(name: str, length: int, periodic: bool, dtype, device, requires_grad: bool, formula) -> Tensor:
    if length < 0:
        raise ArgumentError(f"{name} requires non-negative window_length, got window_length={length}")
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    if not d.is_floating_point:
        raise DTypeError(f"{name} expects floating point dtypes, got: {d.name}")
    if length == 0:
        values = np.zeros(0)
    elif length == 1:
        values = np.ones(1)
    else:
        n = length + 1 if periodic else length
        values = formula(np.arange(n, dtype=np.float64), n)[:length]
    t = placed(Tensor(values.astype(d.np), dtype=d), device_arg(device, name))
    return t.requires_grad_(True) if requires_grad else t


def _cosine_sum(*coefficients):
    """``sum_k (-1)^k a_k cos(2 pi k i / (n - 1))`` (the generalized cosine window)."""

    def formula(i, n):
        out = np.zeros_like(i)
        for k, a in enumerate(coefficients):
            out += (-1) ** k * a * np.cos(2.0 * np.pi * k * i / (n - 1))
        return out

    return formula


def hann_window(
    window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None, requires_grad: bool = False
) -> Tensor:
    """The Hann window ``0.5 - 0.5 cos(2 pi i / (N - 1))`` (``torch.hann_window``): (window_length,).

    Raises:
        ArgumentError: a negative length. DTypeError: a non-floating ``dtype``."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad, _cosine_sum(0.5, 0.5))


def hamming_window(
    window_length: int,
    periodic: bool = True,
    alpha: float = 0.54,
    beta: float = 0.46,
    *,
    dtype=None,
    layout=None,
    device=None,
    requires_grad: bool = False,
) -> Tensor:
    """The Hamming window ``alpha - beta cos(2 pi i / (N - 1))`` (``torch.hamming_window``).

    Raises:
        ArgumentError: a negative length. DTypeError: a non-floating ``dtype``."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad, _cosine_sum(alpha, beta))


def blackman_window(
    window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None, requires_grad: bool = False
) -> Tensor:
    """The Blackman window ``0.42 - 0.5 cos(2 pi i / (N - 1)) + 0.08 cos(4 pi i / (N - 1))``
    (``torch.blackman_window``).

    Raises:
        ArgumentError: a negative length. DTypeError: a non-floating ``dtype``."""
    return _window(
        "blackman_window", window_length, periodic, dtype, device, requires_grad, _cosine_sum(0.42, 0.5, 0.08)
    )


def bartlett_window(
    window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None, requires_grad: bool = False
) -> Tensor:
    """The Bartlett (triangular) window ``1 - |2 i / (N - 1) - 1|`` (``torch.bartlett_window``).

    Raises:
        ArgumentError: a negative length. DTypeError: a non-floating ``dtype``."""

    def formula(i, n):
        return 1.0 - np.abs(2.0 * i / (n - 1) - 1.0)

    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad, formula)


def kaiser_window(
    window_length: int,
    periodic: bool = True,
    beta: float = 12.0,
    *,
    dtype=None,
    layout=None,
    device=None,
    requires_grad: bool = False,
) -> Tensor:
    """The Kaiser window ``I0(beta sqrt(1 - (2 i / (N - 1) - 1)^2)) / I0(beta)``, I0 the modified
    Bessel function of order 0 (``torch.kaiser_window``, ``np.kaiser``).

    Raises:
        ArgumentError: a negative length. DTypeError: a non-floating ``dtype``."""

    def formula(i, n):
        ratio = 2.0 * i / (n - 1) - 1.0
        return np.i0(beta * np.sqrt(np.clip(1.0 - ratio * ratio, 0.0, None))) / np.i0(beta)

    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad, formula)


__all__ = ["hann_window", "hamming_window", "bartlett_window", "blackman_window", "kaiser_window"]
