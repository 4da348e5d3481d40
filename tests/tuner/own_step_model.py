"""A small model file with its own optimizer (tests/tuner/test_tune_user_code.py): ``optimizer()`` builds SGD
at a learning rate no default has, so a trial's measurement tells whose optimizer it stepped; and
``shifted_step``, a training step of the user's own, which counts its calls in ``$AUTOSHARD_TEST_STEP_COUNTER``
(rank 0 of a trial only)."""

from __future__ import annotations

import os

import torch
from torch import nn

WIDTH = 16
LR = 0.0123


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + torch.relu(block(x))
        return self.head(x)


def model() -> nn.Module:
    return Net()


def batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, WIDTH), torch.randn(batch_size, 1)


def loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, batch[1])


def optimizer(params):  # type: ignore[no-untyped-def]
    return torch.optim.SGD(params, lr=LR, momentum=0.9)


def shifted_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The user's own step: counted, so a test sees that trials ran it."""
    counter = os.environ.get("AUTOSHARD_TEST_STEP_COUNTER")
    if counter is not None and "AUTOSHARD_RUN_DIR" in os.environ and os.environ.get("RANK") == "0":
        with open(counter, "a", encoding="utf-8") as f:
            f.write("step\n")
    x, y = batch
    return torch.nn.functional.l1_loss(model(x), y)
