"""Neural-network modules (PyTorch names): Module, Parameter, Linear, Sequential, losses."""

from lazyvic import functional
from lazyvic.nn import init
from lazyvic.nn.module import Module, Parameter
from lazyvic.nn.layers import (
    GELU,
    CrossEntropyLoss,
    Dropout,
    Flatten,
    Identity,
    LayerNorm,
    Linear,
    MSELoss,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from lazyvic.nn import utils

__all__ = [
    "functional", "init", "utils", "Module", "Parameter", "Linear", "Sequential", "ReLU", "GELU", "Tanh",
    "Sigmoid", "Identity", "Flatten", "Dropout", "LayerNorm", "MSELoss", "CrossEntropyLoss",
]
