"""ONNX backend node conformance: the onnx package's own node test cases through lazyvic.onnx.load.

The cases come from the generators in ``onnx.backend.test.case.node`` (seeded; recent onnx wheels
ship no generated ``data/node`` folders): ``collect_testcases()`` runs every ``export*`` method and
returns TestCase objects holding the model and its inputs/expected outputs. A case is *selected*
when the model's default-domain opset is one the importer reads (13 to 28) and every node is a
default-domain op that lazyvic imports at the schema version that opset selects
(``lazyvic.interop.onnx.supported_ops()``; e.g. the Mod cases are generated at opset 28,
whose Mod-28 lazyvic does not import, so they are not selected).

Each case runs once on the NumPy reference interpreter (``LAZYVIC_COMPILE=never``), so results do
not depend on which plans an earlier case made hot; a few cases also run compiled at the end.
Outputs are compared at float32 tolerance (rtol 1e-5, atol 1e-6; tighter than the cases' own
rtol=1e-3), except for the cases in LOOSE_TOLERANCE, which use the case's own tolerance.

Expected failures are strict xfails with a reason: cases using an element type lazyvic lacks
(float16, bfloat16, uint8, int8, float8, int4, strings, ...; the reason names the type, computed by
``_dtype_reason``), and the cases listed in XFAIL.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import lazyvic  # noqa: E402
from lazyvic.interop.onnx import registry  # noqa: E402
from lazyvic.runtime.config import config  # noqa: E402

_LAZYVIC_ELEM_TYPES = {1, 6, 7, 9, 11}  # FLOAT, INT32, INT64, BOOL, DOUBLE

XFAIL = {
    **{
        name: "ScatterElements/ScatterND reduction mul, max and min are not imported ('none' and 'add' are)"
        for name in (
            "test_scatter_elements_with_reduction_mul",
            "test_scatter_elements_with_reduction_max",
            "test_scatter_elements_with_reduction_min",
            "test_scatternd_multiply",
            "test_scatternd_max",
            "test_scatternd_min",
            "test_scatternd_max_with_element_indices",
            "test_scatternd_min_with_element_indices",
        )
    },
    "test_convtranspose_3d": "lazyvic imports 1-D and 2-D ConvTranspose only (functional.conv2d underneath)",
    "test_training_dropout": "random: lazyvic's counter-based generator does not reproduce NumPy's seeded mask",
    "test_training_dropout_mask": "random: lazyvic's counter-based generator does not reproduce NumPy's seeded mask",
    "test_training_dropout_default": "random: lazyvic's counter-based generator does not reproduce NumPy's seeded mask",
    "test_training_dropout_default_mask": "random: lazyvic's counter-based generator does not reproduce NumPy's "
    "seeded mask",
    "test_identity_sequence": "lazyvic has no sequence values (tensors only)",
    "test_identity_opt": "lazyvic has no optional values (tensors only)",
}

# Cases whose expected outputs are rounded (to 4 digits in the generator): the case's own tolerance.
LOOSE_TOLERANCE = {
    "test_averagepool_2d_ceil_last_window_starts_on_pad": "expected values are written rounded to 4 digits",
}

# Run compiled (LAZYVIC_COMPILE=always) as well: one case per kernel family. Compiling costs ~0.5 s each.
COMPILED = {
    "test_conv_with_strides_padding": None,
    "test_maxpool_2d_pads": None,
    "test_gemm_all_attributes": None,
    "test_layer_normalization_3d_axis1_epsilon": None,
    "test_softmax_axis_1": None,
    "test_logsoftmax_large_number": None,  # inputs near 1e4: kernels reassociate only accumulations
}


def _dtype_reason(case) -> str | None:
    """'lazyvic has no <TYPE>' when the case uses an element type lazyvic lacks, else None."""
    g = case.model.graph
    types = [vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.output) if vi.type.HasField("tensor_type")]
    for node in g.node:
        for a in node.attribute:
            if a.name == "to":
                types.append(a.i)
            elif a.type == onnx.AttributeProto.TENSOR:
                types.append(a.t.data_type)
            elif a.type == onnx.AttributeProto.STRING and a.name.startswith("value_string"):
                types.append(onnx.TensorProto.STRING)
    for t in types:
        if t not in _LAZYVIC_ELEM_TYPES:
            return f"lazyvic has no {onnx.TensorProto.DataType.Name(t)}"
    return None


def _collect():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    versions = registry.supported_ops()
    selected = []
    for case in cases:
        opset = [o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")]
        if not opset or not registry.MIN_OPSET <= opset[0] <= registry.MAX_OPSET:
            continue
        if all(
            n.domain in ("", "ai.onnx")
            and n.op_type in versions
            and onnx.defs.get_schema(n.op_type, opset[0], "").since_version in versions[n.op_type]
            for n in case.model.graph.node
        ):
            selected.append(case)
    return selected


CASES = _collect()
_BY_NAME = {c.name: c for c in CASES}
# The expected-failure reason of every selected case (None: it must pass).
REASONS = {c.name: XFAIL.get(c.name) or _dtype_reason(c) for c in CASES}
_RESULTS = {"passed": 0}


def _params():
    for case in CASES:
        reason = REASONS[case.name]
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        yield pytest.param(case.name, id=case.name, marks=marks)


def _array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


class CaseFailure(AssertionError):
    """A failed case, re-raised without the importer's frames: pytest formats a traceback for every
    (expected) failure by parsing each frame's source file, which cost ~0.2 s per xfail."""


def _run_case(case, rtol=1e-5, atol=1e-6):
    try:
        _compare_case(case, rtol, atol)
    except Exception as e:
        raise CaseFailure(f"{case.name}: {type(e).__name__}: {e}") from None


def _compare_case(case, rtol, atol):
    inputs, expected = case.data_sets[0]
    module = lazyvic.onnx.load(case.model)
    got = module(*[_array(x) for x in inputs])
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = g.numpy(), _array(e)
        assert g.dtype == e.dtype, f"dtype {g.dtype}, expected {e.dtype}"
        assert g.shape == e.shape, f"shape {g.shape}, expected {e.shape}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)


@pytest.fixture
def interpreted():
    prev = config.compile
    config.compile = "never"
    yield
    config.compile = prev


@pytest.mark.parametrize("name", list(_params()))
def test_node_case(name, interpreted):
    case = _BY_NAME[name]
    if name in LOOSE_TOLERANCE:
        _run_case(case, rtol=case.rtol, atol=case.atol)
    else:
        _run_case(case)
    _RESULTS["passed"] += 1


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[pytest.mark.xfail(reason=r, strict=True)] if r else []) for n, r in COMPILED.items()],
)
def test_node_case_compiled(name):
    prev = config.compile
    config.compile = "always"
    try:
        _run_case(_BY_NAME[name])
    finally:
        config.compile = prev


def test_conformance_summary(capsys):
    """Prints 'ONNX node conformance: N/M selected cases pass' (counts the cases run in this session)."""
    expected_xfail = sum(1 for reason in REASONS.values() if reason)
    with capsys.disabled():
        print(
            f"\nONNX node conformance: {_RESULTS['passed']}/{len(CASES)} selected cases pass "
            f"({expected_xfail} expected failures, each a strict xfail with its reason)"
        )
    assert len(CASES) > 400
