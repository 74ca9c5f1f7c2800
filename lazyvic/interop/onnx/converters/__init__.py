"""The converters, one per ONNX op type, registered in ``lazyvic.interop.onnx.registry`` on import.
Each declares the schema versions it reads, from opset 7 on (older versions whose semantics differ,
such as Softmax-1 or Split-2, are implemented beside the newer ones).

- ``optable.py``     derived from the op table: Neg Abs Relu Sqrt Exp Log Sigmoid Tanh Erf Not Add
                     Sub Mul Equal Less LessOrEqual Greater GreaterOrEqual Where MatMul Transpose
                     Sin Cos Floor Round Atan Asin Acos Sinh Cosh Asinh Acosh Atanh
- ``elementwise.py`` Div Pow Mod Reciprocal Clip Max Min Sum Mean And Or Xor IsNaN IsInf Identity
                     Dropout Cast CastLike Ceil
- ``activation.py``  LeakyRelu PRelu Sign Softplus Softsign Elu Selu Celu HardSigmoid HardSwish
                     ThresholdedRelu Mish Swish SwiGLU Shrink Gelu
- ``nn.py``          Gemm Softmax LogSoftmax NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss
- ``conv.py``        Conv ConvTranspose
- ``pool.py``        MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool
- ``norm.py``        BatchNormalization InstanceNormalization LayerNormalization GroupNormalization
                     RMSNormalization LpNormalization MeanVarianceNormalization
- ``movement.py``    Reshape Flatten Unsqueeze Squeeze Concat Split Slice Expand Tile Pad Trilu
                     DepthToSpace SpaceToDepth CenterCropPad ReverseSequence
- ``gather.py``      Gather GatherElements GatherND ScatterND ScatterElements Scatter OneHot
- ``reduce.py``      ReduceSum ReduceMean ReduceMax ReduceMin ReduceSumSquare ReduceL1 ReduceL2
                     ReduceLogSum ReduceLogSumExp ArgMax ArgMin CumSum
- ``shape.py``       Shape Size Constant ConstantOfShape Range EyeLike
- ``recurrent.py``   RNN GRU LSTM
- ``attention.py``   Attention RotaryEmbedding
- ``resize.py``      Resize Upsample
- ``einsum.py``      Einsum
- ``windows.py``     (no op type) the window arithmetic Conv, ConvTranspose and the pools share
"""

from lazyvic.interop.onnx.converters import (
    activation,
    attention,
    conv,
    einsum,
    elementwise,
    gather,
    movement,
    nn,
    norm,
    optable,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
)
