"""Neural-network modules (PyTorch names): Module, Parameter, Linear, Sequential, losses."""

from lazyvic import functional
from lazyvic.nn import init, utils
from lazyvic.nn.attention import MultiheadAttention
from lazyvic.nn.layers import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv2d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool2d,
    ModuleDict,
    ModuleList,
    MSELoss,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from lazyvic.nn.module import Module, Parameter

__all__ = [
    "functional", "init", "utils", "Module", "Parameter", "Linear", "Sequential", "ReLU", "GELU", "Tanh",
    "Sigmoid", "Identity", "Flatten", "Dropout", "LayerNorm", "MSELoss", "CrossEntropyLoss", "Embedding",
    "ModuleList", "ModuleDict", "MultiheadAttention", "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Softmax", "LogSoftmax", "LeakyReLU", "SiLU",
]
