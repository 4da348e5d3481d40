"""A small model file whose code raises ``ValueError`` after the first step, inside trial workers only
(tests/tuner/test_tune_user_code.py): ``$AUTOSHARD_TEST_RAISE_IN`` names where (``forward``, ``loss`` or
``step``, the ``training_step`` below) and ``$AUTOSHARD_TEST_RAISE_AT`` at which call (1-based). Planning
traces the model in the tuner's own process, where nothing raises."""

from __future__ import annotations

import os

import torch
from torch import nn

WIDTH = 16
_CALLS = {"forward": 0, "loss": 0, "step": 0}


def _check(where: str) -> None:
    if "AUTOSHARD_RUN_DIR" not in os.environ or os.environ.get("AUTOSHARD_TEST_RAISE_IN") != where:
        return
    _CALLS[where] += 1
    if _CALLS[where] == int(os.environ["AUTOSHARD_TEST_RAISE_AT"]):
        raise ValueError(f"injected bug in the user's {where}, call {_CALLS[where]}")  # RAISE_LINE


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check("forward")
        return self.head(torch.relu(self.fc(x)))


def model() -> nn.Module:
    return Net()


def batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, WIDTH), torch.randn(batch_size, 1)


def loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    _check("loss")
    return torch.nn.functional.mse_loss(output, batch[1])


def training_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    _check("step")
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)
