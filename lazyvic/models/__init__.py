"""Model zoo: ready-made architectures built from ``lazyvic.nn``."""

from lazyvic.models.resnet import ResNet, resnet18
from lazyvic.models.tiny_gpt import TinyGPT

__all__ = ["TinyGPT", "ResNet", "resnet18"]
