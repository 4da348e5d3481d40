"""A small model file whose trial workers record, in their forward, the ``OMP_NUM_THREADS`` they were started with
and torch's intra-op threads, as ``$AUTOSHARD_RUN_DIR/threads-rank<N>.json`` (tests/tuner/test_trial_host_threads.py).
Nothing is written where the model is only traced (no ``AUTOSHARD_RUN_DIR``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

WIDTH = 8


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "AUTOSHARD_RUN_DIR" in os.environ:
            record = {"omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads()}
            path = Path(os.environ["AUTOSHARD_RUN_DIR"]) / f"threads-rank{os.environ.get('RANK', '0')}.json"
            path.write_text(json.dumps(record), encoding="utf-8")
        return self.head(torch.relu(self.fc(x)))


def model() -> nn.Module:
    return Net()


def batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, WIDTH), torch.randn(batch_size, 1)


def loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, batch[1])
