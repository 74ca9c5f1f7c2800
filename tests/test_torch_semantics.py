"""PyTorch code run with ``torch`` bound to ``lazyvic``, against the results real PyTorch gave.

The cases live in tests/fixtures/torch_tensor_api.npz, made by
tests/fixtures/make_tensor_api_fixtures.py with PyTorch 2.13 (see its docstring): short snippets
over named inputs, where PyTorch's answer differs from NumPy's or lazyvic composes the op (ties and
NaN in sorting, rounding half to even, ``sign(nan)``, integer division, index tensors after
integer indices, masks, repeated indices in writes, einsum ...). Each output must have PyTorch's
shape and dtype, integer and bool values must be equal, floating values close; a case with
gradient inputs also compares the gradients of ``sum(out * w)``.

Every case runs on the interpreter; a handful also through the compiler.
"""

from __future__ import annotations

import numpy as np
import pytest
from _torch_fixtures import arrays, spec

import lazyvic

FIXTURE = "torch_tensor_api.npz"
CASES = {case["name"]: case for case in spec(FIXTURE)}
DATA = arrays(FIXTURE)
COMPILED = ["sort", "rounding", "division", "setitem_basic", "setitem_tensors_and_masks", "einsum", "diagonals"]
_TOL = {np.dtype(np.float32): dict(rtol=2e-6, atol=1e-6), np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}


def _flatten(out) -> list:
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flatten(o)]
    return [out]


def _compare(name: str, k: int, got, want: np.ndarray) -> None:
    where = f"{name} output {k}"
    if isinstance(got, lazyvic.Tensor):
        assert got.shape == want.shape, f"{where}: shape {got.shape}, PyTorch {want.shape}"
        assert got.dtype.np == want.dtype, f"{where}: dtype {got.dtype}, PyTorch {want.dtype}"
        got = got.numpy()
    else:  # a Python number (allclose, equal)
        assert np.asarray(got).dtype == want.dtype and type(got) is type(want.item()), f"{where}: {got!r}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=where, **_TOL[want.dtype])
        # signs of zero too (floor(-0.0), round(-0.4), ceil(-0.7) are -0.0 in PyTorch)
        zeros = want == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"{where}: sign of 0")
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def _run_case(name: str) -> None:
    case = CASES[name]
    env = {"torch": lazyvic}
    for k in case["inputs"]:
        env[k] = lazyvic.tensor(DATA[f"{name}.in.{k}"], requires_grad=k in case["grad"])
    exec(case["code"], env)
    outs = _flatten(env["out"])
    assert len(outs) == case["outputs"], f"{name}: {len(outs)} outputs, PyTorch gave {case['outputs']}"
    for k, got in enumerate(outs):
        _compare(name, k, got, DATA[f"{name}.out.{k}"])
    if case["grad"]:
        out = env["out"]
        w = lazyvic.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(*out.shape)
        (out * w).sum().backward()
        for k in case["grad"]:
            want = DATA[f"{name}.grad.{k}"]
            np.testing.assert_allclose(env[k].grad.numpy(), want, rtol=1e-10, atol=1e-12, err_msg=f"{name} grad {k}")


@pytest.mark.parametrize("mode", ["never"], indirect=True)
@pytest.mark.parametrize("name", sorted(CASES))
def test_pytorch_code_gives_pytorch_results(name, mode):
    _run_case(name)


@pytest.mark.parametrize("mode", ["always"], indirect=True)
@pytest.mark.parametrize("name", COMPILED)
def test_pytorch_code_gives_pytorch_results_compiled(name, mode):
    _run_case(name)


def test_the_fixture_covers_the_cases_that_differ_from_numpy():
    """The integer-then-tensor index case really differs from NumPy (so it tests PyTorch's rule)."""
    a = DATA["index_int_then_list.in.a"]
    assert DATA["index_int_then_list.out.0"].shape == (3, 2) and a[0, :, [0, 2]].shape == (2, 3)
    assert np.isnan(DATA["sign.in.a"][2]) and DATA["sign.out.0"][2] == 0  # PyTorch: sign(nan) == 0
