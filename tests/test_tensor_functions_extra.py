"""``lerp``, ``hypot``, ``heaviside``, ``diff``, ``tensor_split``, ``kron``, ``cross`` /
``linalg.cross``, ``block_diag`` and ``cartesian_prod``: PyTorch code run with ``torch`` bound to
``lazyvic`` against the values, dtypes and gradients real PyTorch 2.13 gave
(tests/fixtures/torch_extra_functions.npz, made by make_extra_function_fixtures.py), gradients
against finite differences, and the errors. Everything runs on the interpreter (no compiling).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _oracle import check_vjp
from _pytorch_cases import run_case
from _torch_fixtures import arrays, spec

import lazyvic
from lazyvic import errors
from lazyvic.runtime.config import config

FIXTURE = "torch_extra_functions.npz"
DATA = arrays(FIXTURE)
# the shuffle and padding cases are run by tests/nn/test_shuffle_and_padding_modules.py
NN_PREFIXES = ("pixel_", "channel_", "module_", "zero_pad", "constant_pad", "reflection_pad", "replication_pad")
CASES = {case["name"]: case for case in spec(FIXTURE) if not case["name"].startswith(NN_PREFIXES)}
_TOL = {
    np.dtype(np.float16): dict(rtol=1e-3, atol=1e-3),
    np.dtype(np.float32): dict(rtol=2e-6, atol=1e-6),
    np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12),
}


@pytest.fixture(autouse=True)
def _interpreted():
    prev = config.compile
    config.compile = "never"
    yield
    config.compile = prev


@pytest.mark.parametrize("name", sorted(CASES))
def test_pytorch_code_gives_pytorch_results(name):
    run_case(CASES[name], DATA, lambda name, dtype: _TOL[dtype])


def _r(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape)


# ================================================================ exports
def test_functions_and_methods_are_exported():
    x = lazyvic.tensor(_r(2, 3))
    for name in ("lerp", "hypot", "heaviside", "diff", "tensor_split", "kron", "cross"):
        assert callable(getattr(lazyvic, name)) and callable(getattr(x, name)), name
    assert callable(lazyvic.block_diag) and callable(lazyvic.cartesian_prod) and callable(lazyvic.linalg.cross)


def test_cross_without_dim_warns_as_pytorch():
    a, b = lazyvic.tensor(_r(3, 2)), lazyvic.tensor(_r(3, 2, seed=1))
    with pytest.warns(UserWarning, match="Using torch.cross without specifying the dim arg is deprecated"):
        out = lazyvic.cross(a, b)
    np.testing.assert_allclose(out.numpy(), np.cross(a.numpy(), b.numpy(), axis=0), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lazyvic.linalg.cross(a.t(), b.t())  # no warning with linalg.cross, nor with dim given
        a.cross(b, dim=0)


def test_out_argument_of_the_twins():
    out = lazyvic.zeros(3, dtype=lazyvic.float64)
    lazyvic.hypot(lazyvic.tensor([3.0, 5.0, 8.0]).double(), lazyvic.tensor([4.0, 12.0, 15.0]).double(), out=out)
    np.testing.assert_array_equal(out.numpy(), [5.0, 13.0, 17.0])


# ========================================================== gradients
def test_lerp_vjp_both_formulas():
    w = np.array([-0.7, 0.2, 0.5, 0.8, 1.3])
    check_vjp(lambda a, b, t: lazyvic.lerp(a, b, t), _r(2, 5), _r(5, seed=1), w)
    check_vjp(lambda a, b: a.lerp(b, 0.8), _r(2, 5), _r(2, 5, seed=1))


def test_hypot_diff_kron_cross_vjp():
    check_vjp(lambda a, b: lazyvic.hypot(a, b), _r(3, 4) + 2.0, _r(4, seed=1))
    check_vjp(lambda a, p: lazyvic.diff(a, 2, 0, prepend=p), _r(3, 4), _r(2, 4, seed=1))
    check_vjp(lambda a, b: lazyvic.kron(a, b), _r(2, 3), _r(3, 1, seed=1))
    check_vjp(lambda a, b: lazyvic.linalg.cross(a, b, dim=0), _r(3, 2), _r(3, 1, seed=1))


# ============================================================== errors
def _t(*shape, dtype=lazyvic.float32):
    return lazyvic.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: lazyvic.lerp(_t(3, dtype=lazyvic.int64), _t(3, dtype=lazyvic.int64), 0.5), errors.DTypeError, "lerp: expected a floating-point input, got int64"),
        (lambda: lazyvic.lerp(_t(3), _t(3, dtype=lazyvic.float64), 0.5), errors.DTypeError, "lerp: expected dtype float32 for 'end', got float64"),
        (lambda: lazyvic.lerp(_t(3), _t(3), _t(3, dtype=lazyvic.float64)), errors.DTypeError, "lerp: expected dtype float32 for 'weight'"),
        (lambda: lazyvic.lerp(_t(3), _t(2), 0.5), errors.ShapeError, r"lerp: shapes \(3,\) and \(2,\) cannot be broadcast"),
        (lambda: lazyvic.lerp(_t(3), _t(3), _t(2)), errors.ShapeError, r"lerp: shapes \(3,\) and \(2,\) cannot be broadcast"),
        (lambda: lazyvic.hypot(_t(3), _t(2)), errors.ShapeError, r"hypot: shapes \(3,\) and \(2,\) cannot be broadcast"),
        (lambda: lazyvic.heaviside(_t(3), _t(2)), errors.ShapeError, r"heaviside: shapes \(3,\) and \(2,\) cannot be broadcast"),
        (lambda: lazyvic.hypot(_t(3, dtype=lazyvic.int64), _t(3, dtype=lazyvic.int64)), errors.DTypeError, "hypot: expected floating-point operands, got int64 and int64"),
        (lambda: lazyvic.hypot(_t(3), 2.0), errors.DTypeError, "hypot: argument 'other' must be a Tensor"),
        (lambda: lazyvic.heaviside(_t(3), _t(3, dtype=lazyvic.float64)), errors.DTypeError, "heaviside: expected dtype float32 for 'values', got float64"),
        (lambda: lazyvic.diff(_t()), errors.ShapeError, "diff: expects input to be at least one-dimensional"),
        (lambda: lazyvic.diff(_t(5), -1), errors.ArgumentError, "diff: order must be non-negative, got -1"),
        (lambda: lazyvic.diff(_t(5), prepend=_t()), errors.ShapeError, r"diff: expects prepend to have the same number of dimensions as input, got \(\) and \(5,\)"),
        (lambda: lazyvic.diff(_t(2, 3), dim=0, append=_t(1, 2)), errors.ShapeError, r"diff: append must match the shape of input \(2, 3\) except along dim 0, got \(1, 2\)"),
        (lambda: lazyvic.diff(_t(2, 3), dim=2), errors.IndexError_, "diff: dim 2 out of range"),
        (lambda: lazyvic.tensor_split(_t(), 2), errors.ShapeError, "tensor_split: expected at least a 1-dimensional tensor"),
        (lambda: lazyvic.tensor_split(_t(7), 0), errors.ArgumentError, "tensor_split: number of sections must be larger than 0, got 0"),
        (lambda: lazyvic.tensor_split(_t(7), 2.0), errors.DTypeError, "tensor_split: indices_or_sections must be an int or a list"),
        (lambda: lazyvic.tensor_split(_t(7), _t(2)), errors.DTypeError, "tensor_split: a tensor of indices_or_sections must be"),
        (lambda: lazyvic.cross(_t(2, 4), _t(2, 4)), errors.ShapeError, r"cross: no dimension of size 3 in input of shape \(2, 4\)"),
        (lambda: lazyvic.linalg.cross(_t(2, 4), _t(2, 4)), errors.ShapeError, "linalg.cross: inputs dimension -1 must have length 3, got 4 and 4"),
        (lambda: lazyvic.linalg.cross(_t(2, 3), _t(3)), errors.ShapeError, "linalg.cross: inputs must have the same number of dimensions"),
        (lambda: lazyvic.linalg.cross(_t(2, 3), _t(2, 3, dtype=lazyvic.float64)), errors.DTypeError, "linalg.cross: inputs must have one dtype, got float32 and float64"),
        (lambda: lazyvic.linalg.cross(_t(2, 3), _t(3, 3)), errors.ShapeError, r"linalg.cross: shapes \(2, 3\) and \(3, 3\) cannot be broadcast"),
        (lambda: lazyvic.linalg.cross(_t(2, 3), _t(2, 3), dim=2), errors.IndexError_, "linalg.cross: dim 2 out of range"),
        (lambda: lazyvic.block_diag(_t(2, 2, 2)), errors.ShapeError, r"block_diag: input tensors must have 2 or fewer dimensions; input 0 has shape \(2, 2, 2\)"),
        (lambda: lazyvic.cartesian_prod(), errors.ArgumentError, "cartesian_prod: expected at least one tensor"),
        (lambda: lazyvic.cartesian_prod(_t(2, 2)), errors.ShapeError, r"cartesian_prod: expected 1-D tensors, got shape \(2, 2\)"),
        (lambda: lazyvic.cartesian_prod(_t(2), _t(2, dtype=lazyvic.int64)), errors.DTypeError, "cartesian_prod: expected tensors of one dtype"),
    ],
)  # fmt: skip
def test_errors_are_typed_and_name_the_function(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_block_diag_of_nothing_and_cartesian_prod_of_one():
    empty = lazyvic.block_diag()
    assert empty.shape == (1, 0) and empty.dtype == lazyvic.get_default_dtype()
    a = lazyvic.tensor([1, 2])
    assert lazyvic.cartesian_prod(a) is a
