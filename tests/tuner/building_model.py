"""A model file whose trial worker of rank 0, in its first forward, starts "building" a torch extension op as
torch's loader does (``FileBaton`` on ``$TORCH_EXTENSIONS_DIR/<tag>/building_op/lock``) and never finishes, so the
trial runs past its time limit and is stopped mid-build (tests/tuner/test_trial_build_lock.py). Nothing happens
where the model is only traced (no ``AUTOSHARD_RUN_DIR``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.file_baton import FileBaton


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "AUTOSHARD_RUN_DIR" in os.environ and os.environ.get("RANK", "0") == "0":
            lock = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / "py311_cpu" / "building_op" / "lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            if FileBaton(str(lock)).try_acquire():  # held open until the process is killed
                time.sleep(3600)
        return self.fc(x)


def model() -> nn.Module:
    return Net()


def batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 8), torch.randn(batch_size, 1)


def loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, batch[1])
