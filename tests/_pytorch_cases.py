"""Running a PyTorch fixture case (``tests/fixtures/make_*_fixtures.py``: a line of PyTorch code,
its inputs, and PyTorch's outputs and input gradients) with ``torch`` bound to lazyvic."""

from __future__ import annotations

import warnings

import numpy as np

import lazyvic

GRAD_TOLERANCE = dict(rtol=1e-10, atol=1e-12)  # gradients are float64 in the fixtures


def _flatten(out) -> list:
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flatten(o)]
    return [out]


def run_case(case: dict, data: dict, tolerance, grad_tolerance=lambda name: GRAD_TOLERANCE) -> None:
    """Run ``case["code"]`` with its inputs from ``data``; compare every output (shape, dtype,
    values: ``tolerance(name, np_dtype)`` for floats, exact otherwise) and, when the case lists
    inputs in ``grad``, the gradients of ``(out * linspace(0.5, 1.5)).sum()``
    (``grad_tolerance(name)``). Warnings of the code are silenced (the files test them)."""
    name = case["name"]
    env = {"torch": lazyvic}
    for k in case["inputs"]:
        env[k] = lazyvic.tensor(data[f"{name}.in.{k}"], requires_grad=k in case["grad"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(case["code"], env)
    outs = _flatten(env["out"])
    assert len(outs) == case["outputs"], f"{name}: {len(outs)} outputs, PyTorch gave {case['outputs']}"
    for k, got in enumerate(outs):
        want = data[f"{name}.out.{k}"]
        where = f"{name} output {k}"
        assert isinstance(got, lazyvic.Tensor), f"{where}: a {type(got).__name__}"
        assert got.shape == want.shape, f"{where}: shape {got.shape}, PyTorch {want.shape}"
        assert got.dtype.np == want.dtype, f"{where}: dtype {got.dtype}, PyTorch {want.dtype}"
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got.numpy(), want, equal_nan=True, err_msg=where, **tolerance(name, want.dtype))
        else:
            np.testing.assert_array_equal(got.numpy(), want, err_msg=where)
    if case["grad"]:
        out = env["out"]
        w = lazyvic.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(*out.shape)
        (out * w).sum().backward()
        for k in case["grad"]:
            want = data[f"{name}.grad.{k}"]
            np.testing.assert_allclose(env[k].grad.numpy(), want, err_msg=f"{name} grad {k}", **grad_tolerance(name))
