"""ONNX backend node conformance: the onnx package's own node test cases through lazyvic.onnx.load.

The cases come from the generators in ``onnx.backend.test.case.node`` (seeded; recent onnx wheels
ship no generated ``data/node`` folders): ``collect_testcases()`` runs every ``export*`` method and
returns TestCase objects holding the model and its inputs/expected outputs. A case is *selected*
when the model's default-domain opset is one the importer reads (7 to 28) and every node is a
default-domain op that lazyvic imports at the schema version that opset selects
(``lazyvic.interop.onnx.supported_ops()``; e.g. the Mod cases are generated at opset 28,
whose Mod-28 lazyvic does not import, so they are not selected). Most generators write opset 13 or
later; the And, Or, Xor, Shrink, Scatter, Upsample and old Dropout cases are at opsets 7 to 11.

Old opsets, further: the cases in CONVERTED also run converted down to an opset from 7 to 12 by
``onnx.version_converter`` (``<case>@opset<k>``: the lowest opset the converter reaches at which a
node's schema version differs from the original's), with the original's expected outputs; the
table lists the cases the converter handles (onnx 1.23; regenerate it when onnx changes).

Each case runs once on the NumPy reference interpreter (``LAZYVIC_COMPILE=never``), so results do
not depend on which plans an earlier case made hot; a few cases also run compiled at the end.
Outputs are compared at float32 tolerance (rtol 1e-5, atol 1e-6; tighter than the cases' own
rtol=1e-3), except for the cases in LOOSE_TOLERANCE, which use the case's own tolerance. float16
and bfloat16 outputs must be equal (NaN equal to NaN), except for the cases in HALF_ULPS, which
may differ by the given number of units in the last place of the half type: lazyvic computes each
primitive in float32 and rounds its result to the half type (a composite node such as Softmax or
LayerNormalization in float32, rounded once: ``lazyvic/interop/onnx/halves.py``), and those
cases' expected values round at other points (the Attention reference after each NumPy step).

Expected failures are strict xfails with a reason: cases using an element type lazyvic lacks
(float8, float4, int4, uint4, int2, uint2, strings, ...; the reason names the type, computed by
``_dtype_reason``), and the cases listed in XFAIL.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import lazyvic  # noqa: E402
from lazyvic.interop.onnx import registry  # noqa: E402
from lazyvic.interop.onnx.context import tensor_array  # noqa: E402
from lazyvic.runtime.config import config  # noqa: E402

# FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, BOOL, FLOAT16, DOUBLE, UINT32, UINT64, BFLOAT16
_LAZYVIC_ELEM_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16}

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
    "test_training_dropout": "random: lazyvic's counter-based generator does not reproduce NumPy's seeded mask",
    "test_training_dropout_mask": "random: lazyvic's counter-based generator does not reproduce NumPy's seeded mask",
    "test_training_dropout_default": "random: lazyvic's counter-based generator does not reproduce NumPy's seeded mask",
    "test_training_dropout_default_mask": "random: lazyvic's counter-based generator does not reproduce NumPy's "
    "seeded mask",
    "test_identity_sequence": "lazyvic has no sequence values (tensors only)",
    "test_identity_opt": "lazyvic has no optional values (tensors only)",
}

# Converted cases whose converted model computes something else than the original (the failure is
# the converter's): the reason, by case name.
XFAIL_CONVERTED = {
    name: "onnx's version converter keeps Softmax's axis when it converts to opset 12 or below, where "
    "Softmax and LogSoftmax coerce the input to 2-D, so the converted model computes another function "
    "(lazyvic agrees with onnxruntime on it; tests/interop/test_onnx_old_opsets.py checks the 2-D coercion)"
    for name in ("test_softmax_axis_0", "test_softmax_axis_1", "test_logsoftmax_axis_0", "test_logsoftmax_axis_1")
}

CONVERTED = {
    7: (
        "test_basic_conv_with_padding",
        "test_basic_conv_without_padding",
        "test_conv_with_strides_padding",
        "test_conv_with_strides_no_padding",
        "test_conv_with_strides_and_asymmetric_padding",
        "test_conv_with_autopad_same",
        "test_convtranspose",
        "test_convtranspose_1d",
        "test_convtranspose_3d",
        "test_convtranspose_output_shape",
        "test_convtranspose_pad",
        "test_convtranspose_kernel_shape",
        "test_convtranspose_pads",
        "test_convtranspose_dilations",
        "test_convtranspose_autopad_same",
        "test_convtranspose_group_2",
        "test_convtranspose_group_2_image_3",
        "test_cos_example",
        "test_cos",
        "test_elu_example",
        "test_elu",
        "test_elu_default",
        "test_globalaveragepool",
        "test_globalaveragepool_precomputed",
        "test_gru_defaults",
        "test_gru_with_initial_bias",
        "test_gru_seq_length",
        "test_gru_reverse",
        "test_gru_bidirectional",
        "test_hardsigmoid_example",
        "test_hardsigmoid",
        "test_hardsigmoid_default",
        "test_instancenorm_example",
        "test_instancenorm_epsilon",
        "test_leakyrelu_example",
        "test_leakyrelu",
        "test_leakyrelu_default",
        "test_logsoftmax_example_1",
        "test_logsoftmax_large_number",
        "test_logsoftmax_axis_0",
        "test_logsoftmax_axis_1",
        "test_logsoftmax_axis_2",
        "test_logsoftmax_negative_axis",
        "test_logsoftmax_default_axis",
        "test_l2normalization_axis_0",
        "test_l2normalization_axis_1",
        "test_l1normalization_axis_0",
        "test_l1normalization_axis_1",
        "test_l1normalization_axis_last",
        "test_lpnormalization_default",
        "test_lstm_defaults",
        "test_lstm_with_initial_bias",
        "test_lstm_with_peepholes",
        "test_lstm_reverse",
        "test_lstm_bidirectional",
        "test_prelu_example",
        "test_prelu_broadcast",
        "test_simple_rnn_defaults",
        "test_simple_rnn_with_initial_bias",
        "test_rnn_seq_length",
        "test_simple_rnn_reverse",
        "test_simple_rnn_bidirectional",
        "test_selu_example",
        "test_selu",
        "test_selu_default",
        "test_sin_example",
        "test_sin",
        "test_softmax_example",
        "test_softmax_large_number",
        "test_softmax_axis_0",
        "test_softmax_axis_1",
        "test_softmax_axis_2",
        "test_softmax_negative_axis",
        "test_softmax_default_axis",
        "test_softplus_example",
        "test_softplus",
        "test_softsign_example",
        "test_softsign",
    ),
    9: (
        "test_eyelike_without_dtype",
        "test_eyelike_with_dtype",
        "test_eyelike_populate_off_main_diagonal",
        "test_where_example",
        "test_where_long_example",
    ),
    10: (
        "test_averagepool_2d_precomputed_pads",
        "test_averagepool_2d_precomputed_pads_count_include_pad",
        "test_averagepool_2d_precomputed_strides",
        "test_averagepool_2d_precomputed_same_upper",
        "test_averagepool_1d_default",
        "test_averagepool_2d_default",
        "test_averagepool_3d_default",
        "test_averagepool_2d_same_upper",
        "test_averagepool_2d_same_lower",
        "test_averagepool_2d_pads",
        "test_averagepool_2d_pads_count_include_pad",
        "test_averagepool_2d_strides",
        "test_averagepool_2d_ceil",
        "test_averagepool_2d_ceil_last_window_starts_on_pad",
        "test_isinf",
        "test_isinf_positive",
        "test_isinf_negative",
        "test_maxpool_2d_precomputed_pads",
        "test_maxpool_with_argmax_2d_precomputed_pads",
        "test_maxpool_2d_precomputed_strides",
        "test_maxpool_with_argmax_2d_precomputed_strides",
        "test_maxpool_2d_precomputed_same_upper",
        "test_maxpool_1d_default",
        "test_maxpool_2d_default",
        "test_maxpool_3d_default",
        "test_maxpool_2d_same_upper",
        "test_maxpool_2d_same_lower",
        "test_maxpool_2d_pads",
        "test_maxpool_2d_strides",
        "test_maxpool_2d_ceil",
        "test_maxpool_2d_ceil_output_size_reduce_by_one",
        "test_maxpool_2d_dilations",
        "test_maxpool_3d_dilations",
        "test_maxpool_3d_dilations_use_ref_impl",
        "test_maxpool_3d_dilations_use_ref_impl_large",
        "test_reversesequence_time",
        "test_reversesequence_batch",
        "test_thresholdedrelu_example",
        "test_thresholdedrelu",
        "test_thresholdedrelu_default",
    ),
    11: (
        "test_range_float_type_positive_delta",
        "test_range_int32_type_negative_delta",
        "test_round",
        "test_split_equal_parts_1d_opset13",
        "test_split_equal_parts_2d_opset13",
        "test_split_equal_parts_default_axis_opset13",
    ),
    12: (
        "test_celu",
        "test_constant",
        "test_einsum_transpose",
        "test_einsum_sum",
        "test_einsum_batch_diagonal",
        "test_einsum_inner_prod",
        "test_einsum_batch_matmul",
        "test_einsum_scalar",
        "test_greater_equal",
        "test_greater_equal_int8",
        "test_greater_equal_int16",
        "test_greater_equal_uint8",
        "test_greater_equal_uint16",
        "test_greater_equal_uint32",
        "test_greater_equal_uint64",
        "test_greater_equal_bcast",
        "test_less_equal",
        "test_less_equal_int8",
        "test_less_equal_int16",
        "test_less_equal_uint8",
        "test_less_equal_uint16",
        "test_less_equal_uint32",
        "test_less_equal_uint64",
        "test_less_equal_bcast",
        "test_maxpool_2d_uint8",
    ),
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
    # Storage dtypes: half-type kernels (float32 compute, each result rounded), wrapping integers.
    "test_celu_bfloat16": None,
    "test_einsum_batch_matmul_bfloat16": None,
    "test_attention_4d_fp16": None,
    "test_mul_uint8": None,
    "test_div_int8": None,
    "test_add_uint64": None,
    "test_maxpool_2d_uint8": None,
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
_RESULTS = {"passed": 0, "converted": 0}

# float16 / bfloat16 outputs that may differ from the expected ones by a few units in the last place
# (ulps) of the half type: (ulps, why), by case name.
_ATTENTION_ROUNDING = (
    "the reference computes attention with NumPy on the half-type arrays, rounding after each NumPy "
    "step (QK^T, x - max, exp, each partial sum of the softmax, the division, the product with V); "
    "lazyvic's matmuls accumulate in float32 and its Softmax node is computed in float32 and rounded once"
)
HALF_ULPS = {c.name: (2, _ATTENTION_ROUNDING) for c in CASES if c.name.startswith("test_attention")}


def _params():
    for case in CASES:
        reason = REASONS[case.name]
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        yield pytest.param(case.name, id=case.name, marks=marks)


def _array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):  # bfloat16 decoded as ml_dtypes whatever the onnx release
        return tensor_array(value)
    return np.asarray(value)


class CaseFailure(AssertionError):
    """A failed case, re-raised without the importer's frames: pytest formats a traceback for every
    (expected) failure by parsing each frame's source file, which cost ~0.2 s per xfail."""


_HALF = {
    np.dtype(np.float16): lazyvic.finfo(lazyvic.float16),
    np.dtype(ml_dtypes.bfloat16): lazyvic.finfo(lazyvic.bfloat16),
}


def _assert_half_close(got: np.ndarray, expected: np.ndarray, ulps: int) -> None:
    """float16 / bfloat16 arrays equal (NaN equal to NaN, infinities equal) or, with ``ulps``, within
    that many units in the last place of the half type at each expected value."""
    g, e = got.astype(np.float32), expected.astype(np.float32)
    if not ulps:
        np.testing.assert_array_equal(g, e)
        return
    info = _HALF[expected.dtype]
    np.testing.assert_array_equal(np.isnan(g), np.isnan(e), err_msg="NaN positions")
    finite = np.isfinite(e)
    np.testing.assert_array_equal(g[~finite & ~np.isnan(e)], e[~finite & ~np.isnan(e)], err_msg="infinities")
    ulp = np.maximum(2.0 ** np.floor(np.log2(np.maximum(np.abs(e[finite]), info.tiny))), info.tiny) * info.eps
    distance = np.abs(g[finite].astype(np.float64) - e[finite]) / ulp
    assert not distance.size or distance.max() <= ulps, (
        f"{distance.max():g} ulps of {expected.dtype} apart (at most {ulps}): got {got.reshape(-1)[:8]}, "
        f"expected {expected.reshape(-1)[:8]}"
    )


def _run_case(case, rtol=1e-5, atol=1e-6, model=None):
    try:
        _compare_case(case, rtol, atol, model or case.model)
    except Exception as e:
        raise CaseFailure(f"{case.name}: {type(e).__name__}: {e}") from None


def _compare_case(case, rtol, atol, model):
    inputs, expected = case.data_sets[0]
    module = lazyvic.onnx.load(model)
    got = module(*[_array(x) for x in inputs])
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = g.numpy(), _array(e)
        assert g.dtype == e.dtype, f"dtype {g.dtype}, expected {e.dtype}"
        assert g.shape == e.shape, f"shape {g.shape}, expected {e.shape}"
        if e.dtype in _HALF:
            _assert_half_close(g, e, HALF_ULPS.get(case.name, (0, ""))[0])
        elif e.dtype.kind == "f":
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


def _converted_params():
    for opset, names in CONVERTED.items():
        for name in names:
            if name not in _BY_NAME:  # another onnx release may not generate it
                continue
            reason = XFAIL_CONVERTED.get(name) or REASONS[name]
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            yield pytest.param(name, opset, id=f"{name}@opset{opset}", marks=marks)


@pytest.mark.parametrize("name, opset", list(_converted_params()))
def test_node_case_converted(name, opset, interpreted):
    """The case converted down to ``opset`` by onnx's version converter: old schema versions
    (Conv-1, Softmax-1, MaxPool-10, Split-11, OneHot-11, ...) against the original's outputs."""
    from onnx import version_converter

    case = _BY_NAME[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = version_converter.convert_version(case.model, opset)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    tolerance = {"rtol": case.rtol, "atol": case.atol} if name in LOOSE_TOLERANCE else {}
    _run_case(case, model=model, **tolerance)
    _RESULTS["converted"] += 1


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
    converted = list(_converted_params())
    with capsys.disabled():
        print(
            f"\nONNX node conformance: {_RESULTS['passed']}/{len(CASES)} selected cases pass "
            f"({expected_xfail} expected failures, each a strict xfail with its reason); "
            f"{_RESULTS['converted']}/{len(converted)} cases converted to opsets 7-12 pass"
        )
    assert len(CASES) > 400
    old = [c for c in CASES if any(o.version < 13 for o in c.model.opset_import if o.domain in ("", "ai.onnx"))]
    assert len(old) >= 20  # And, Or, Xor (7), Shrink (9), Scatter, Upsample (9, 10), Dropout-10 (11)
