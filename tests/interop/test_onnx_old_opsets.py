"""ONNX models at opsets 7 to 12: every op version before 13 that the importer declares, checked
against onnxruntime (the reference for reading old versions) on a small model at an opset that
selects it; models PyTorch exported at opsets 9 to 11; and the graph-output shape warning.

Each case is one node; its first input is fed, the others are initializers (floating-point ones
become parameters, integer ones constants, as in any imported model). lazyvic runs on the NumPy
reference interpreter; outputs must match onnxruntime's dtype and shape, values within rtol 1e-5,
atol 1e-6. ``test_every_old_version_is_tested`` fails when a declared version has no case.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lazyvic  # noqa: E402
from lazyvic.errors import OnnxError, UnsupportedOpError  # noqa: E402
from lazyvic.interop.onnx import OnnxShapeWarning, supported_ops  # noqa: E402
from lazyvic.runtime.config import config  # noqa: E402

R = np.random.default_rng(0)
F32 = np.float32
X = R.normal(size=(2, 3, 4)).astype(F32)  # the usual data input
POS = np.abs(X) + 0.5  # for Log, Sqrt, Reciprocal, ReduceLogSum
TRIG_OPSET9 = ("Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
IMG = R.normal(size=(1, 2, 5, 5)).astype(F32)
M34, M45 = R.normal(size=(3, 4)).astype(F32), R.normal(size=(4, 5)).astype(F32)
I64 = np.int64


def i64(*v):
    return np.array(v, I64)


class Case:
    """One node at ``opset``: ``inputs`` in node order (None: an omitted optional input), the
    first fed, the rest initializers; ``outputs`` output count; node attributes in ``attrs``."""

    def __init__(self, id, opset, op, inputs, outputs=1, fed=1, **attrs):
        self.id, self.opset, self.op, self.inputs, self.outputs, self.fed, self.attrs = (
            id,
            opset,
            op,
            inputs,
            outputs,
            fed,
            attrs,
        )

    def model(self):
        names = [f"in{i}" if v is not None else "" for i, v in enumerate(self.inputs)]
        node = helper.make_node(self.op, names, [f"out{i}" for i in range(self.outputs)], **self.attrs)
        feeds = {n: v for n, v in zip(names[: self.fed], self.inputs[: self.fed])}
        inits = [
            numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names[self.fed :], self.inputs[self.fed :]) if n
        ]
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ]
        outputs = [onnx.ValueInfoProto(name=f"out{i}") for i in range(self.outputs)]
        graph = helper.make_graph([node], self.id, graph_inputs, outputs, initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 7
        return model, feeds


def C(*args, **kw):
    case = Case(*args, **kw)
    return pytest.param(case, id=case.id)


BN = [np.array(v, F32) for v in ([1.0, 2.0], [0.5, -0.5], [0.1, -0.2], [2.0, 0.5])]
BN0 = [
    np.broadcast_to(v[:, None, None], (2, 5, 5)).copy() * (1 + 0.1 * R.normal(size=(2, 5, 5))).astype(F32) for v in BN
]
BN0[3] = np.abs(BN0[3])
W_CONV = R.normal(size=(3, 2, 3, 3)).astype(F32)
W_CONVT = R.normal(size=(2, 3, 3, 3)).astype(F32)
LSTM_W, LSTM_R, LSTM_B = (R.normal(size=s).astype(F32) * 0.3 for s in ((1, 16, 4), (1, 16, 4), (1, 32)))

CASES = [
    # ---------------------------------------------------------------- elementwise (types only)
    *(
        C(f"{op}-opset7", 7, op, [POS if op in ("Log", "Sqrt", "Reciprocal") else X])
        for op in (
            "Neg",
            "Abs",
            "Exp",
            "Log",
            "Sqrt",
            "Tanh",
            "Sigmoid",
            "Relu",
            "Floor",
            "Ceil",
            "Reciprocal",
            "Identity",
            "Softplus",
            "Softsign",
            "Sin",
            "Cos",
            "LeakyRelu",
            "Elu",
            "Selu",
            "HardSigmoid",
        )
    ),
    *(C(f"{op}-opset9", 9, op, [X]) for op in ("Erf", "Sign", "Shrink")),
    *(C(f"{op}-opset7", 7, op, [np.tanh(X)]) for op in ("Atan", "Asin", "Acos")),
    *(C(f"{op}-opset9", 9, op, [POS + 0.5 if op == "Acosh" else np.tanh(X)]) for op in TRIG_OPSET9),
    C("IsNaN-opset9", 9, "IsNaN", [np.array([1.0, np.nan, 0.0], F32)]),
    C("IsInf-opset10", 10, "IsInf", [np.array([1.0, np.inf, -np.inf], F32)]),
    C("ThresholdedRelu-opset10", 10, "ThresholdedRelu", [X], alpha=0.3),
    C("Round-opset11", 11, "Round", [X * 3]),
    C("Celu-opset12", 12, "Celu", [X], alpha=0.5),
    *(C(f"{op}-opset7", 7, op, [X, R.normal(size=(4,)).astype(F32)]) for op in ("Add", "Sub", "Mul", "Div")),
    C("Pow-opset7", 7, "Pow", [POS, np.array([2.0, 0.5, 3.0, 1.0], F32)]),
    C("Pow-opset12-int-exponent", 12, "Pow", [POS, i64(2)]),
    C("Equal-opset7-int", 7, "Equal", [i64(1, 2, 3), i64(1, 0, 3)]),
    C("Equal-opset11-float", 11, "Equal", [np.array([1.0, 2.0], F32), np.array([1.0, 0.0], F32)]),
    C("Less-opset7", 7, "Less", [X, np.zeros(4, F32)]),
    C("Greater-opset9-int", 9, "Greater", [i64(1, 5, 3), i64(2, 2, 2)]),
    C("LessOrEqual-opset12", 12, "LessOrEqual", [X, np.zeros(4, F32)]),
    C("GreaterOrEqual-opset12", 12, "GreaterOrEqual", [X, np.zeros(4, F32)]),
    C("Mod-opset10-fmod", 10, "Mod", [X * 5, np.array([1.5], F32)], fmod=1),
    C("Mod-opset10-int", 10, "Mod", [i64(7, -7, 5), i64(3, 3, -2)]),
    C("Max-opset7-same-shape", 7, "Max", [X, X[::-1].copy(), -X]),
    C("Min-opset7-same-shape", 7, "Min", [X, X[::-1].copy()]),
    C("Sum-opset7-same-shape", 7, "Sum", [X, X, X]),
    C("Mean-opset7-same-shape", 7, "Mean", [X, -X * 2]),
    C("Max-opset8-broadcast", 8, "Max", [X, np.zeros(4, F32)]),
    C("Min-opset8-broadcast", 8, "Min", [X, np.zeros((3, 1), F32)]),
    C("Sum-opset8-broadcast", 8, "Sum", [X, np.ones(4, F32)]),
    C("Mean-opset8-broadcast", 8, "Mean", [X, np.ones((3, 1), F32)]),
    C("PRelu-opset7", 7, "PRelu", [X, np.array([0.1, 0.2, 0.3, 0.4], F32)]),
    C("PRelu-opset9", 9, "PRelu", [X, np.array([[0.1], [0.2], [0.3]], F32)]),
    C("MatMul-opset7", 7, "MatMul", [M34, M45]),
    C("MatMul-opset9-batched", 9, "MatMul", [X, M45]),
    *(
        C(f"{op}-opset7", 7, op, [np.array([True, False, True]), np.array([True, True, False])])
        for op in ("And", "Or", "Xor")
    ),
    C("Greater-opset7", 7, "Greater", [X, np.zeros(4, F32)]),
    C("Less-opset9-int", 9, "Less", [i64(1, 5, 3), i64(2, 2, 2)]),
    C("Max-opset12-int", 12, "Max", [i64(1, 5, 3), i64(2, 2, 2)]),
    C("Min-opset12", 12, "Min", [X, np.zeros(4, F32)]),
    C("Not-opset7", 7, "Not", [np.array([True, False])]),
    C("Where-opset9", 9, "Where", [np.array([True, False, True, False]), X, np.zeros(4, F32)], fed=1),
    C("Cast-opset7", 7, "Cast", [X], to=TensorProto.INT32),
    C("Cast-opset9", 9, "Cast", [i64(1, -2, 3)], to=TensorProto.FLOAT),
    # ---------------------------------------------------------------- semantics that changed
    C("Clip-opset7-attributes", 7, "Clip", [X], min=-0.5, max=0.25),
    C("Clip-opset7-min-only", 7, "Clip", [X], min=0.0),
    C("Clip-opset7-no-bounds", 7, "Clip", [X]),
    C("Clip-opset11-inputs", 11, "Clip", [X, np.array(-0.5, F32)]),
    C("Clip-opset12-int", 12, "Clip", [i64(-5, 0, 5), i64(-2), i64(3)]),
    C("Softmax-opset7-default-axis-coerces", 7, "Softmax", [X]),
    C("Softmax-opset7-axis0", 7, "Softmax", [X], axis=0),
    C("Softmax-opset7-last-axis", 7, "Softmax", [X], axis=2),
    C("Softmax-opset11-negative-axis", 11, "Softmax", [X], axis=-2),
    C("LogSoftmax-opset7-default-axis-coerces", 7, "LogSoftmax", [X]),
    C("LogSoftmax-opset11-axis0", 11, "LogSoftmax", [X], axis=0),
    C("Gemm-opset7-broadcast-C", 7, "Gemm", [M34, M45, np.ones((1, 5), F32)], alpha=0.5, beta=2.0),
    C("Gemm-opset9-transposed", 9, "Gemm", [M34.T.copy(), M45.T.copy(), np.ones(5, F32)], transA=1, transB=1),
    C("Gemm-opset11-no-C", 11, "Gemm", [M34, M45]),
    C("Dropout-opset10", 10, "Dropout", [X], outputs=2, ratio=0.3),
    C("Dropout-opset12", 12, "Dropout", [X, np.array(0.2, F32)], outputs=2),
    C("Unsqueeze-opset7-attribute", 7, "Unsqueeze", [X], axes=[0, 3]),
    C("Unsqueeze-opset11-negative", 11, "Unsqueeze", [X], axes=[-1]),
    C("Squeeze-opset7-attribute", 7, "Squeeze", [X[:, :1]], axes=[1]),
    C("Squeeze-opset7-all", 7, "Squeeze", [X[:1, :, :1]]),
    C("Squeeze-opset11-negative", 11, "Squeeze", [X[:, :, :1]], axes=[-1]),
    C("Split-opset7-attribute", 7, "Split", [X], outputs=2, axis=2, split=[1, 3]),
    C("Split-opset7-equal", 7, "Split", [X], outputs=2, axis=0),
    C("Split-opset11-negative-axis", 11, "Split", [X], outputs=3, axis=-2),
    C("Slice-opset7-attributes", 7, "Slice", [X], starts=[1, -3], ends=[3, 100], axes=[1, 2]),
    C("Slice-opset7-no-axes", 7, "Slice", [X], starts=[0, 1], ends=[1, 3]),
    C("Slice-opset10-steps", 10, "Slice", [X, i64(3, 0), i64(0, 4), i64(2, 1), i64(-1, 2)]),
    C("Slice-opset11-negative-axes", 11, "Slice", [X, i64(1), i64(3), i64(-2)]),
    C("Pad-opset7-constant", 7, "Pad", [X], pads=[0, 1, 2, 0, 0, 1], value=1.5),
    C("Pad-opset7-reflect", 7, "Pad", [IMG], mode="reflect", pads=[0, 0, 1, 2, 0, 0, 2, 1]),
    C("Pad-opset7-edge", 7, "Pad", [IMG], mode="edge", pads=[0, 0, 2, 0, 0, 0, 0, 3]),
    C("Pad-opset11-inputs", 11, "Pad", [X, i64(0, 1, 1, 0, 0, 1), np.array(-1.0, F32)]),
    C("ReduceSum-opset7-attribute", 7, "ReduceSum", [X], axes=[0, 2], keepdims=0),
    C("ReduceSum-opset7-all", 7, "ReduceSum", [X]),
    C("ReduceSum-opset11-negative", 11, "ReduceSum", [X], axes=[-1]),
    *(
        C(f"{op}-opset7", 7, op, [POS], axes=[1])
        for op in (
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceSumSquare",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
        )
    ),
    *(
        C(f"{op}-opset11", 11, op, [POS], axes=[-1], keepdims=0)
        for op in (
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceSumSquare",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
        )
    ),
    C("ReduceMax-opset12", 12, "ReduceMax", [X], axes=[0]),
    C("ReduceMin-opset12-int", 12, "ReduceMin", [i64(3, 1, 2)], keepdims=0),
    C("ArgMax-opset7", 7, "ArgMax", [X], axis=2),
    C("ArgMin-opset7", 7, "ArgMin", [X], axis=1, keepdims=0),
    C("ArgMax-opset11-negative", 11, "ArgMax", [X], axis=-1),
    C("ArgMin-opset11-negative", 11, "ArgMin", [X], axis=-2, keepdims=0),
    C("ArgMax-opset12-last-index", 12, "ArgMax", [np.array([[1.0, 3.0, 3.0, 0.0]], F32)], axis=1, select_last_index=1),
    C("ArgMin-opset12", 12, "ArgMin", [X], axis=0),
    # ---------------------------------------------------------------- shapes and gathers
    C("Reshape-opset7", 7, "Reshape", [X, i64(4, 0, -1)]),
    C("Flatten-opset7", 7, "Flatten", [X], axis=2),
    C("Flatten-opset9", 9, "Flatten", [X], axis=0),
    C("Flatten-opset11-negative", 11, "Flatten", [X], axis=-1),
    C("Concat-opset7", 7, "Concat", [X, X[:, :1]], axis=1),
    C("Concat-opset11-negative", 11, "Concat", [X, X[:, :, :2]], axis=-1),
    C("Expand-opset8", 8, "Expand", [X[:, :1], i64(2, 3, 4)]),
    C("Tile-opset7", 7, "Tile", [X, i64(1, 2, 1)]),
    C("Transpose-opset7", 7, "Transpose", [X], perm=[2, 0, 1]),
    C("Shape-opset7", 7, "Shape", [X]),
    C("Size-opset7", 7, "Size", [X]),
    C("DepthToSpace-opset7", 7, "DepthToSpace", [R.normal(size=(1, 8, 2, 3)).astype(F32)], blocksize=2),
    C(
        "DepthToSpace-opset11-CRD",
        11,
        "DepthToSpace",
        [R.normal(size=(1, 8, 2, 3)).astype(F32)],
        blocksize=2,
        mode="CRD",
    ),
    C("SpaceToDepth-opset7", 7, "SpaceToDepth", [R.normal(size=(1, 2, 4, 6)).astype(F32)], blocksize=2),
    C("Gather-opset7", 7, "Gather", [X, i64(2, 0)], axis=1),
    C("Gather-opset11-negative", 11, "Gather", [X, i64(-1, 0, -2)], axis=2),
    C("GatherElements-opset11", 11, "GatherElements", [M34, np.array([[0, 3], [1, -1], [2, 2]], I64)], axis=1),
    C("GatherND-opset11", 11, "GatherND", [X, np.array([[0, 1], [1, 2]], I64)]),
    C("GatherND-opset12-batch-dims", 12, "GatherND", [X, np.array([[1], [2]], I64)], batch_dims=1),
    C(
        "ScatterElements-opset11",
        11,
        "ScatterElements",
        [M34, np.array([[1], [0], [3]], I64), np.ones((3, 1), F32)],
        axis=1,
    ),
    C("ScatterND-opset11", 11, "ScatterND", [X, np.array([[1, 0]], I64), np.ones((1, 4), F32)]),
    C("Scatter-opset9", 9, "Scatter", [M34, np.array([[1, 0, 2, 0]], I64), np.ones((1, 4), F32)], axis=0),
    C("OneHot-opset9-negative-index", 9, "OneHot", [i64(0, -1, 2, 7), i64(4), np.array([0.0, 1.0], F32)]),
    C("OneHot-opset11", 11, "OneHot", [i64(1, 3), i64(4), np.array([-1.0, 2.0], F32)], axis=0),
    C("Constant-opset7", 7, "Constant", [], value=numpy_helper.from_array(M34)),
    C("Constant-opset9-int", 9, "Constant", [], value=numpy_helper.from_array(i64(4, 5))),
    C("Constant-opset11", 11, "Constant", [], value=numpy_helper.from_array(np.array(2.5, F32))),
    C("Constant-opset12-value-ints", 12, "Constant", [], value_ints=[1, 2, 3]),
    C("ConstantOfShape-opset9", 9, "ConstantOfShape", [i64(2, 3)], value=numpy_helper.from_array(np.array([1.5], F32))),
    C("EyeLike-opset9", 9, "EyeLike", [M34], k=1),
    C("Range-opset11", 11, "Range", [np.array(1.0, F32), np.array(5.0, F32), np.array(1.5, F32)]),
    C("CumSum-opset11", 11, "CumSum", [X, np.array(1, np.int32)], reverse=1),
    C("ReverseSequence-opset10", 10, "ReverseSequence", [X, i64(2, 1, 2)], batch_axis=1, time_axis=0),
    C("Einsum-opset12", 12, "Einsum", [M34, M45], equation="ij,jk->ik"),
    # ---------------------------------------------------------------- layers
    C("BatchNormalization-opset7", 7, "BatchNormalization", [IMG, *BN]),
    C("BatchNormalization-opset7-spatial0", 7, "BatchNormalization", [IMG, *BN0], spatial=0, epsilon=1e-3),
    C("BatchNormalization-opset7-training", 7, "BatchNormalization", [IMG, *BN], outputs=5, momentum=0.8),
    C("BatchNormalization-opset9", 9, "BatchNormalization", [IMG, *BN]),
    C("BatchNormalization-opset9-training", 9, "BatchNormalization", [IMG, *BN], outputs=5),
    C("InstanceNormalization-opset7", 7, "InstanceNormalization", [IMG, BN[0], BN[1]]),
    C("LpNormalization-opset7", 7, "LpNormalization", [X], axis=1, p=1),
    C("MeanVarianceNormalization-opset9", 9, "MeanVarianceNormalization", [IMG]),
    C("GlobalAveragePool-opset7", 7, "GlobalAveragePool", [IMG]),
    C("GlobalMaxPool-opset7", 7, "GlobalMaxPool", [IMG]),
    C("MaxPool-opset7", 7, "MaxPool", [IMG], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]),
    C("MaxPool-opset8-indices", 8, "MaxPool", [IMG], outputs=2, kernel_shape=[2, 2], storage_order=1),
    C(
        "MaxPool-opset10-ceil-dilations",
        10,
        "MaxPool",
        [IMG],
        kernel_shape=[2, 2],
        strides=[2, 2],
        ceil_mode=1,
        dilations=[1, 2],
    ),
    C("MaxPool-opset11-same-upper", 11, "MaxPool", [IMG], kernel_shape=[2, 3], auto_pad="SAME_UPPER"),
    C("MaxPool-opset12", 12, "MaxPool", [IMG], kernel_shape=[2, 2], strides=[1, 2]),
    C(
        "AveragePool-opset7-include-pad",
        7,
        "AveragePool",
        [IMG],
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        count_include_pad=1,
    ),
    C("AveragePool-opset10-ceil", 10, "AveragePool", [IMG], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    C("AveragePool-opset11", 11, "AveragePool", [IMG], kernel_shape=[2, 2], pads=[1, 0, 0, 1]),
    C("LpPool-opset7", 7, "LpPool", [IMG], kernel_shape=[2, 2], p=2),
    C("LpPool-opset11", 11, "LpPool", [IMG], kernel_shape=[3, 3], p=1, pads=[1, 1, 1, 1]),
    C("Conv-opset7", 7, "Conv", [IMG, W_CONV, np.array([0.1, 0.2, 0.3], F32)], pads=[1, 1, 1, 1], strides=[2, 1]),
    C("Conv-opset11-same-lower", 11, "Conv", [IMG, W_CONV], auto_pad="SAME_LOWER", strides=[2, 2]),
    C("ConvTranspose-opset7-same-upper", 7, "ConvTranspose", [IMG, W_CONVT], auto_pad="SAME_UPPER", strides=[2, 2]),
    C("ConvTranspose-opset7-output-padding", 7, "ConvTranspose", [IMG, W_CONVT], strides=[2, 2], output_padding=[1, 0]),
    C(
        "ConvTranspose-opset11-pads",
        11,
        "ConvTranspose",
        [IMG, W_CONVT, np.ones(3, F32)],
        pads=[1, 0, 0, 1],
        strides=[2, 1],
    ),
    C(
        "LSTM-opset7",
        7,
        "LSTM",
        [R.normal(size=(3, 2, 4)).astype(F32), LSTM_W, LSTM_R, LSTM_B],
        outputs=3,
        hidden_size=4,
    ),
    C(
        "GRU-opset7",
        7,
        "GRU",
        [R.normal(size=(3, 2, 4)).astype(F32), LSTM_W[:, :12], LSTM_R[:, :12], LSTM_B[:, :24]],
        outputs=2,
        hidden_size=4,
    ),
    C(
        "RNN-opset7",
        7,
        "RNN",
        [R.normal(size=(3, 2, 4)).astype(F32), LSTM_W[:, :4], LSTM_R[:, :4], LSTM_B[:, :8]],
        outputs=2,
        hidden_size=4,
    ),
    C("NegativeLogLikelihoodLoss-opset12", 12, "NegativeLogLikelihoodLoss", [np.log(np.abs(M34) + 0.1), i64(0, 3, 1)]),
    C(
        "SoftmaxCrossEntropyLoss-opset12",
        12,
        "SoftmaxCrossEntropyLoss",
        [M34, i64(0, 3, 1)],
        outputs=2,
        reduction="sum",
    ),
    # ---------------------------------------------------------------- resizing
    C("Upsample-opset7-nearest", 7, "Upsample", [IMG], scales=[1.0, 1.0, 2.0, 1.5]),
    C("Upsample-opset7-linear", 7, "Upsample", [IMG], mode="linear", scales=[1.0, 1.0, 1.5, 2.0]),
    C("Upsample-opset9-nearest", 9, "Upsample", [IMG, np.array([1.0, 1.0, 3.0, 2.0], F32)]),
    C("Upsample-opset9-linear", 9, "Upsample", [IMG, np.array([1.0, 1.0, 2.0, 2.5], F32)], mode="linear"),
    C("Resize-opset10-nearest", 10, "Resize", [IMG, np.array([1.0, 1.0, 1.6, 0.6], F32)]),
    C("Resize-opset10-nearest-shrink", 10, "Resize", [IMG, np.array([1.0, 1.0, 0.8, 0.35], F32)]),
    C("Resize-opset10-linear-shrink", 10, "Resize", [IMG, np.array([1.0, 1.0, 0.6, 1.3], F32)], mode="linear"),
    C("Resize-opset10-linear", 10, "Resize", [IMG, np.array([1.0, 1.0, 2.0, 0.8], F32)], mode="linear"),
    C(
        "Resize-opset11-scales",
        11,
        "Resize",
        [IMG, np.array([], F32), np.array([1.0, 1.0, 2.0, 1.5], F32)],
        mode="linear",
        coordinate_transformation_mode="half_pixel",
    ),
    C(
        "Resize-opset11-sizes",
        11,
        "Resize",
        [IMG, np.array([], F32), np.array([], F32), i64(1, 2, 3, 8)],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    ),
    # ---------------------------------------------------------------- linear algebra
    C("Det-opset11", 11, "Det", [(R.uniform(-1, 1, size=(2, 3, 3)) + 2.5 * np.eye(3)).astype(F32)]),
]


def _ort(model, feeds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture
def interpreted():
    prev = config.compile
    config.compile = "never"
    yield
    config.compile = prev


@pytest.mark.parametrize("case", CASES)
def test_old_version_matches_onnxruntime(case, interpreted):
    model, feeds = case.model()
    expected = _ort(model, feeds)
    module = lazyvic.onnx.load(model)
    got = module(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        g = g.numpy()
        assert g.dtype == e.dtype and g.shape == e.shape, (i, g.dtype, g.shape, e.dtype, e.shape)
        if case.op == "Dropout" and i == 1:
            # The mask outside training: lazyvic keeps every element (the spec's and the onnx
            # reference's reading); onnxruntime writes zeros before Dropout-12.
            assert g.all()
        elif e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, e)


def test_dropout_opset7_mask_has_the_input_type():
    """Dropout-7's mask output has type T (the input's), not bool (from Dropout-10); every element
    is kept outside training (onnxruntime writes zeros, the onnx reference ones)."""
    model, feeds = Case("d7", 7, "Dropout", [X], outputs=2, ratio=0.5).model()
    y, mask = lazyvic.onnx.load(model)(X)
    np.testing.assert_array_equal(y.numpy(), X)
    assert mask.numpy().dtype == np.float32 and (mask.numpy() == 1.0).all()
    assert _ort(model, feeds)[1].dtype == np.float32


def test_every_old_version_is_tested():
    """Each since-version before 13 that a converter declares, for an op that exists at opsets 7 to
    12, is selected by at least one case above."""
    tested = {
        (c.values[0].op, onnx.defs.get_schema(c.values[0].op, c.values[0].opset, "").since_version) for c in CASES
    }
    tested.add(("Dropout", 7))  # test_dropout_opset7_mask_has_the_input_type
    missing = []
    for op, versions in supported_ops().items():
        for opset in range(7, 13):
            try:
                version = onnx.defs.get_schema(op, opset, "").since_version
            except Exception:
                continue
            if version in versions and (op, version) not in tested:
                missing.append(f"{op}-{version}")
    assert not missing, f"old versions without a case: {sorted(set(missing))}"


def test_versions_that_do_not_exist_or_were_removed_are_refused():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = onnx.ValueInfoProto(name="y")

    def model(node, opset):
        m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        return m

    with pytest.raises(UnsupportedOpError, match="opset 6 is not supported"):
        lazyvic.onnx.load(model(helper.make_node("Relu", ["x"], ["y"]), 6))
    # Upsample is deprecated from opset 10 (onnxruntime refuses it too): Resize replaces it.
    with pytest.raises(UnsupportedOpError, match=r"Upsample version 10 \(at opset 10; lazyvic handles versions 7, 9\)"):
        lazyvic.onnx.load(model(helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 2.0]), 10))
    with pytest.raises(UnsupportedOpError, match="Upsample-9 with mode='cubic'"):
        s = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([1.0, 2.0], F32)))
        m = model(helper.make_node("Upsample", ["x", "s"], ["y"], mode="cubic"), 9)
        m.graph.node.insert(0, s)
        lazyvic.onnx.load(m)


def test_bad_old_version_attributes_raise_naming_the_node():
    cases = [
        (Case("sq", 7, "Squeeze", [X], axes=[0]), "cannot squeeze axis 0 of size 2"),
        (Case("sp", 7, "Split", [X], outputs=2, axis=2, split=[1, 2]), r"split sizes \[1, 2\] do not add up to 4"),
        (Case("sl", 7, "Slice", [X], starts=[0, 0], ends=[1]), "differ in length"),
        (Case("pd", 7, "Pad", [X], pads=[1, 1]), "pads .* must have 2 entries per padded axis"),
        (Case("up", 7, "Upsample", [IMG], scales=[2.0, 2.0]), r"scales must have one value per input axis \(4\)"),
        (Case("up", 7, "Upsample", [IMG], scales=[1.0, 1.0, 0.5, 1.0]), "scales must be at least 1"),
        (Case("sm", 7, "Softmax", [X], axis=3), "axis 3 is out of range for rank 3"),
    ]
    for case, message in cases:
        model, feeds = case.model()
        with pytest.raises(OnnxError, match=rf"node '{case.op}_0' \({case.op}\).*{message}|{message}"):
            lazyvic.onnx.load(model)(*feeds.values())


# ------------------------------------------------------------------ declared output shapes
def _lstm_dynamo_like(seq_declared: int):
    """An LSTM graph as PyTorch's dynamo exporter writes one: the sequence axis of the input is
    dynamic, but the outputs declare the static sizes of the example it traced."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 2, 4])
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq_declared, 1, 2, 4]),
        helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, 2, 4]),
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in (("W", LSTM_W), ("R", LSTM_R), ("B", LSTM_B))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=4)
    graph = helper.make_graph([node], "lstm", [x], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_output_shape_that_disagrees_with_a_dynamic_axis_warns_as_onnxruntime(interpreted):
    model = _lstm_dynamo_like(seq_declared=3)
    module = lazyvic.onnx.load(model)
    x = R.normal(size=(5, 2, 4)).astype(F32)
    with pytest.warns(
        OnnxShapeWarning, match=r"graph output 'y' has shape \(5, 1, 2, 4\), but the graph declares \(3, 1, 2, 4\)"
    ):
        y, y_h = module(x)
    expected = _ort(model, {"x": x})  # onnxruntime logs a warning and returns the computed values
    np.testing.assert_allclose(y.numpy(), expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_h.numpy(), expected[1], rtol=1e-5, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the declared size: no warning
        module(x[:3])


def test_output_rank_that_disagrees_warns_and_inputs_must_still_fit():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 1])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    module = lazyvic.onnx.load(m)
    with pytest.warns(OnnxShapeWarning, match=r"has shape \(5, 3\), but the graph declares \(2, 3, 1\)"):
        assert module(np.ones((5, 3), F32)).shape == (5, 3)
    with pytest.raises(OnnxError, match=r"graph input 'x' has shape \(5, 4\), but the graph declares \('b', 3\)"):
        module(np.ones((5, 4), F32))


# ------------------------------------------------------------------ models PyTorch exported
OLD = Path(__file__).resolve().parents[1] / "fixtures" / "onnx_old"
EXPORTED = ("cnn_opset9", "cnn_opset10", "cnn_opset11", "lstm_opset9", "lstm_opset11", "generator_opset9")


@pytest.mark.parametrize("name", EXPORTED)
def test_models_pytorch_exported_at_old_opsets(name, interpreted):
    """PyTorch's TorchScript exporter at opsets 9 to 11 (tests/fixtures/make_onnx_old_opset_fixtures.py):
    Upsample-9, Resize-10/-11, MaxPool-8/-10, Conv-1, ConvTranspose-1, LogSoftmax-1, Gemm-9,
    Slice-1, Squeeze/Unsqueeze-1, Concat-4, LSTM-7 ... give PyTorch's outputs (and onnxruntime's)."""
    values = np.load(OLD / "torch_values.npz")
    x = values[f"{name}.input"]
    got = lazyvic.onnx.load(str(OLD / f"{name}.onnx"))(x).numpy()
    np.testing.assert_allclose(got, values[f"{name}.output"], rtol=1e-5, atol=2e-6)
    session = ort.InferenceSession(str(OLD / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {session.get_inputs()[0].name: x})[0], rtol=1e-5, atol=2e-6)


def test_lstm_exported_at_opset9_runs_at_another_sequence_length(interpreted):
    path = str(OLD / "lstm_opset9.onnx")
    idx = np.random.default_rng(1).integers(0, 11, (8, 2)).astype(np.int64)
    got = lazyvic.onnx.load(path)(idx).numpy()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert got.shape == (8, 2, 11)
    np.testing.assert_allclose(got, session.run(None, {"idx": idx})[0], rtol=1e-5, atol=2e-6)
