"""The C library calls of the kernel language, as NumPy ufuncs for the interpreter.

Kernels compute ``math.sin`` of a float32 with ``sinf``, float64 ``math.exp`` with ``exp``, ``x ** y``
with ``powf``/``pow``: Numba lowers them to LLVM intrinsics that call the C library. NumPy's own
``np.sin``/``np.exp``/``np.power`` are SIMD implementations whose last bits differ. These ufuncs
(Numba ``vectorize``, compiled on first use and cached on disk) call the same C functions, so the
interpreter's references give the kernels' bits (``ops/numerics.py``). Each takes and
returns float32 or float64 arrays; float64-only ones are those whose float32 kernel uses an
approximation of ``kernel_lib`` instead.
"""

from __future__ import annotations

import math

from numba import njit, vectorize

_BOTH = ["float32(float32)", "float64(float64)"]
_F64 = ["float64(float64)"]


@vectorize(_BOTH, cache=True)
def sin(x):
    return math.sin(x)


@vectorize(_BOTH, cache=True)
def cos(x):
    return math.cos(x)


@vectorize(_BOTH, cache=True)
def log1p(x):
    return math.log1p(x)


@vectorize(_BOTH, cache=True)
def expm1(x):
    return math.expm1(x)


# Inverse trigonometric and hyperbolic functions: ``asinf``/``asin`` ... as Numba lowers ``math.asin``
# (numba/cpython/mathimpl.py: float32 calls the C library's float32 function, not a float64 one).
@vectorize(_BOTH, cache=True)
def atan(x):
    return math.atan(x)


@vectorize(_BOTH, cache=True)
def asin(x):
    return math.asin(x)


@vectorize(_BOTH, cache=True)
def acos(x):
    return math.acos(x)


@vectorize(_BOTH, cache=True)
def sinh(x):
    return math.sinh(x)


@vectorize(_BOTH, cache=True)
def cosh(x):
    return math.cosh(x)


@vectorize(_BOTH, cache=True)
def asinh(x):
    return math.asinh(x)


@vectorize(_BOTH, cache=True)
def acosh(x):
    return math.acosh(x)


@vectorize(_BOTH, cache=True)
def atanh(x):
    return math.atanh(x)


@vectorize(["float32(float32, float32)", "float64(float64, float64)"], cache=True)
def atan2(y, x):
    return math.atan2(y, x)


@njit(error_model="numpy", cache=True)  # as kernels: 0.0 ** -1 is inf, not ZeroDivisionError
def _power(a, b):
    return a**b


@vectorize(["float32(float32, float32)", "float64(float64, float64)"], cache=True)
def power(a, b):
    return _power(a, b)


@vectorize(_F64, cache=True)
def exp(x):
    return math.exp(x)


@vectorize(_F64, cache=True)
def log(x):
    return math.log(x)


@vectorize(_F64, cache=True)
def tanh(x):
    return math.tanh(x)


@vectorize(_F64, cache=True)
def erf(x):
    return math.erf(x)


@vectorize(_F64, cache=True)
def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))  # kernel_lib.sigmoid_f64
