"""ResNet-50 (He et al. 2016, arXiv:1512.03385) in torchvision's "v1.5" form, for ImageNet classification.

Architecture: a 7x7 stride-2 stem and 3x3 max-pool, four stages of bottleneck blocks (1x1 → 3x3 → 1x1 with
4x expansion; the stride sits on the 3x3 convolution, torchvision's v1.5 variant), batch norm after every
convolution, global average pooling and a linear classifier. Parameter counts equal ``torchvision.models.resnet50``.

The entry has no ``num_layers``/``with_num_layers``: the 16 bottlenecks are not one homogeneous stack (each
stage doubles the width, and each stage's first block downsamples), so a trace of ``n`` blocks does not scale
linearly to the full network, and the full network is cheap to trace anyway.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autoshard.models.catalog import register
from autoshard.models.catalog._common import (
    catalog_source,
    classification_loss,
    entry_metadata,
    image_batch,
    random_state_restored,
    reset_parameters_,
    whole_parameters,
)
from autoshard.models.source import ModelSource


@dataclass(frozen=True, kw_only=True, slots=True)
class ResNetConfig:
    """ResNet hyperparameters; defaults are ResNet-50 on ImageNet (He et al. 2016, Table 1)."""

    blocks_per_stage: tuple[int, ...] = (3, 4, 6, 3)
    """Bottleneck blocks in each stage (``conv2_x`` … ``conv5_x``)."""
    base_width: int = 64
    """Stem output channels and the first stage's bottleneck width; each later stage doubles it."""
    num_classes: int = 1000
    """Classifier outputs (ImageNet-1k)."""
    image_size: int = 224
    """Side of the square input images the example batch uses."""


class Bottleneck(nn.Module):
    """``1x1 → 3x3 (stride) → 1x1`` convolutions with batch norm and a (projected) identity shortcut.

    Args:
        in_channels: channels entering the block.
        width: channels of the inner 1x1/3x3 convolutions; the block outputs ``4 * width``.
        stride: stride of the 3x3 convolution (2 in the first block of stages 2-4).
    """

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``(batch, channels, height, width)``."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut)


class ResNet(nn.Module):
    """Bottleneck ResNet returning class logits ``(batch, num_classes)``; stages live in ``self.stages``."""

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.config = config
        with random_state_restored():  # init_weights() redraws these layers' default initialisation
            self.conv1 = nn.Conv2d(3, config.base_width, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(config.base_width)
            stages: list[nn.Module] = []
            channels = config.base_width
            for index, num_blocks in enumerate(config.blocks_per_stage):
                width = config.base_width * 2**index
                blocks = []
                for block_index in range(num_blocks):
                    stride = 2 if index > 0 and block_index == 0 else 1
                    blocks.append(Bottleneck(channels, width, stride))
                    channels = width * Bottleneck.expansion
                stages.append(nn.Sequential(*blocks))
            self.stages = nn.ModuleList(stages)
            self.fc = nn.Linear(channels, config.num_classes)
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter and batch-norm statistic in place, as the constructor does.

        Works on plain tensors, on DTensor shards (e.g. after ``to_empty`` on a model built on ``meta``) and on
        ZeRO-3 partitions made by ``deepspeed.zero.Init`` (see :func:`whole_parameters`).
        torch's default initialisation is redrawn first, in construction order (the convolutions' is then
        overwritten), so that a seeded build gives the same weights as when each layer initialised itself.
        """
        reset_parameters_(self)
        # torchvision's initialisation: Kaiming-normal (fan-out) convolutions, unit-scale zero-shift batch norm.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                with whole_parameters(m.weight):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``(batch, 3, H, W)`` images; ``labels`` is ignored (the entry's loss uses it)."""
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(pixel_values))), kernel_size=3, stride=2, padding=1)
        for stage in self.stages:
            x = stage(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _entry(name: str, config: ResNetConfig, *, reference: str, published_parameters: int | None) -> ModelSource:
    metadata = entry_metadata(
        reference, published_parameters,
        "torchvision.models.resnet50 (parameters; batch-norm running stats are buffers)",
        image_size=config.image_size,
    )
    return catalog_source(
        name,
        build_fn=functools.partial(ResNet, config),
        batch_fn=functools.partial(image_batch, image_size=config.image_size, num_classes=config.num_classes),
        loss_fn=classification_loss,
        metadata=metadata,
    )


@register("resnet50")
def resnet50() -> ModelSource:
    """ResNet-50 for 224x224 ImageNet classification, 25.6M parameters."""
    return _entry(
        "resnet50",
        ResNetConfig(),
        # num_params 25,557,032 on the torchvision model page (IMAGENET1K_V1/V2 weights).
        reference="https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html",
        published_parameters=25_557_032,
    )


@register("tiny-resnet")
def tiny_resnet() -> ModelSource:
    """A ResNet of one bottleneck per stage, base width 8, 10 classes.

    Its 64x64 images leave 2x2 maps at the last stage, so training-mode batch norm works at batch size 1.
    """
    return _entry(
        "tiny-resnet",
        ResNetConfig(blocks_per_stage=(1, 1, 1, 1), base_width=8, num_classes=10, image_size=64),
        reference="autoshard test model: ResNet-50 architecture, tiny dimensions",
        published_parameters=None,
    )
