"""ResNet-18 (He et al. 2016) with torchvision's layout and parameter names.

``conv1``, ``bn1``, ``layer1`` .. ``layer4`` (two ``BasicBlock``s each, with
``conv1``/``bn1``/``conv2``/``bn2`` and a ``downsample`` of a 1x1 convolution and a
batch norm where the shape changes), ``fc`` — so torchvision checkpoints load by
name. ``width`` scales every stage (64 is torchvision's); ``small_input`` swaps the
7x7/2 stem and its max pool for a 3x3/1 convolution (the usual CIFAR variant,
same parameter names).
"""

from __future__ import annotations

from lazyvic import nn
from lazyvic.nn import init
from lazyvic.tensor import Tensor


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection: (N, inplanes, H, W) ->
    (N, planes, H/stride, W/stride)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )
        else:
            self.downsample = None

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class ResNet(nn.Module):
    """x (N, 3, H, W) -> logits (N, num_classes)."""

    def __init__(self, layers=(2, 2, 2, 2), num_classes: int = 1000, width: int = 64, small_input: bool = False):
        super().__init__()
        if small_input:
            self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.Identity() if small_input else nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = width
        for i, blocks in enumerate(layers):
            planes, stride = width * 2**i, 1 if i == 0 else 2
            stage = [BasicBlock(inplanes, planes, stride)] + [BasicBlock(planes, planes) for _ in range(blocks - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
            inplanes = planes
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)
        # torchvision's initialization: He normal (fan_out) for convolutions; BN weight 1, bias 0.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def resnet18(num_classes: int = 1000, width: int = 64, small_input: bool = False) -> ResNet:
    """ResNet-18 as ``torchvision.models.resnet18`` (``width=64``, ``small_input=False``)."""
    return ResNet((2, 2, 2, 2), num_classes=num_classes, width=width, small_input=small_input)
