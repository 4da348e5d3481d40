"""A linear-regression task for the one-process fit() tests: fixed batches ``(x, x @ w)`` and their loss."""

from __future__ import annotations

import torch
from torch import nn


def batches(n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches of 4 samples with 8 features, the same on every call."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 1, generator=g)
    xs = [torch.randn(4, 8, generator=g) for _ in range(n)]
    return [(x, x @ w) for x in xs]


def mse(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean squared error against the batch's targets."""
    return nn.functional.mse_loss(output, batch[1])
