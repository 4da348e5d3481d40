"""Vision Transformer ViT-B/16 (Dosovitskiy et al. 2021, arXiv:2010.11929) in torchvision's form.

Architecture: a strided convolution cuts the image into 16x16 patches, a learned class token is prepended and
learned position embeddings added, pre-LayerNorm encoder blocks (fused QKV attention, GELU MLP), a final
LayerNorm and a linear head on the class token. Parameter counts equal ``torchvision.models.vit_b_16``; the
image size is fixed by the position table, so the entry takes no sequence length.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from autoshard.models.catalog import register
from autoshard.models.catalog._common import (
    classification_loss,
    entry_metadata,
    image_batch,
    layered_source,
    merge_heads,
    random_state_restored,
    reset_parameters_,
    split_heads,
    whole_parameters,
)
from autoshard.models.source import ModelSource


@dataclass(frozen=True, kw_only=True, slots=True)
class ViTConfig:
    """ViT hyperparameters; defaults are ViT-B/16 (Dosovitskiy et al. 2021, Table 1; torchvision ``vit_b_16``)."""

    image_size: int = 224
    """Side of the square input images."""
    patch_size: int = 16
    """Side of the square patches."""
    hidden_size: int = 768
    """Token width."""
    num_layers: int = 12
    """Encoder blocks."""
    num_heads: int = 12
    """Attention heads."""
    mlp_dim: int = 3072
    """MLP width."""
    num_classes: int = 1000
    """Classifier outputs (ImageNet-1k)."""
    dropout: float = 0.0
    """torchvision's ``dropout`` default."""
    attention_dropout: float = 0.0
    """torchvision's ``attention_dropout`` default."""
    layer_norm_eps: float = 1e-6
    """torchvision's LayerNorm ``eps``."""

    @property
    def num_tokens(self) -> int:
        """Patches plus the class token."""
        return (self.image_size // self.patch_size) ** 2 + 1


class ViTEncoderBlock(nn.Module):
    """One pre-LayerNorm encoder block (bidirectional attention, GELU MLP); repeated ``num_layers`` times."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_heads
        self.attention_dropout = config.attention_dropout
        self.ln_1 = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.qkv = nn.Linear(h, 3 * h)
        self.out_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.mlp_in = nn.Linear(h, config.mlp_dim)
        self.mlp_out = nn.Linear(config.mlp_dim, h)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``(batch, tokens, hidden)``."""
        q, k, v = (split_heads(t, self.num_heads) for t in self.qkv(self.ln_1(x)).chunk(3, dim=-1))
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attention_dropout if self.training else 0.0)
        x = x + self.dropout(self.out_proj(merge_heads(attn)))
        hidden = self.dropout(F.gelu(self.mlp_in(self.ln_2(x))))
        return x + self.dropout(self.mlp_out(hidden))


class VisionTransformer(nn.Module):
    """ViT returning class logits ``(batch, num_classes)`` from the class token."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        with random_state_restored():  # init_weights() redraws these layers' default initialisation
            self.conv_proj = nn.Conv2d(3, h, kernel_size=config.patch_size, stride=config.patch_size)
            self.class_token = nn.Parameter(torch.empty(1, 1, h))
            self.pos_embedding = nn.Parameter(torch.empty(1, config.num_tokens, h))
            self.dropout = nn.Dropout(config.dropout)
            self.layers = nn.ModuleList(ViTEncoderBlock(config) for _ in range(config.num_layers))
            self.ln = nn.LayerNorm(h, eps=config.layer_norm_eps)
            self.head = nn.Linear(h, config.num_classes)
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter in place, as the constructor does.

        Works on plain tensors, on DTensor shards (e.g. after ``to_empty`` on a model built on ``meta``) and on
        ZeRO-3 partitions made by ``deepspeed.zero.Init`` (see :func:`whole_parameters`).
        The layers keep torch's default initialisation, redrawn in construction order so that a seeded build
        gives the same weights as when each layer initialised itself at construction.
        """
        with whole_parameters(self.conv_proj, self.class_token, self.pos_embedding):
            self.conv_proj.reset_parameters()
            nn.init.zeros_(self.class_token)
            # Position embeddings start from N(0, 0.02²), as in torchvision.
            nn.init.normal_(self.pos_embedding, std=0.02)
        reset_parameters_(self.layers)
        with whole_parameters(self.ln, self.head):
            self.ln.reset_parameters()
            self.head.reset_parameters()

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for ``(batch, 3, image_size, image_size)`` images; ``labels`` is ignored (the loss uses it)."""
        patches = self.conv_proj(pixel_values).flatten(2).transpose(1, 2)
        cls = self.class_token.expand(patches.size(0), -1, -1)
        x = self.dropout(torch.cat((cls, patches), dim=1) + self.pos_embedding)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x)[:, 0])


def _entry(name: str, config: ViTConfig, *, reference: str, published_parameters: int | None) -> ModelSource:
    # num_tokens is fixed by the learned position table: patches + class token.
    metadata = entry_metadata(reference, published_parameters, "torchvision.models.vit_b_16",
                              image_size=config.image_size, num_tokens=config.num_tokens)
    return layered_source(
        name,
        config,
        build=VisionTransformer,
        batch_fn=functools.partial(image_batch, image_size=config.image_size, num_classes=config.num_classes),
        loss_fn=classification_loss,
        metadata=metadata,
    )


@register("vit-b-16")
def vit_b_16() -> ModelSource:
    """ViT-B/16 for 224x224 ImageNet classification, 86.6M parameters."""
    return _entry(
        "vit-b-16",
        ViTConfig(),
        # num_params 86,567,656 on the torchvision model page (IMAGENET1K_V1 weights).
        reference="https://pytorch.org/vision/stable/models/generated/torchvision.models.vit_b_16.html",
        published_parameters=86_567_656,
    )


@register("tiny-vit")
def tiny_vit() -> ModelSource:
    """A ViT of two blocks, width 64, on 32x32 images cut into 8x8 patches, 10 classes."""
    return _entry(
        "tiny-vit",
        ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=256, num_classes=10),
        reference="autoshard test model: ViT-B/16 architecture, tiny dimensions",
        published_parameters=None,
    )
