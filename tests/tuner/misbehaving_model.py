"""A small model file whose tuning trials misbehave on purpose (tests/tuner/test_tune_study.py).

Only inside trial workers (``AUTOSHARD_RUN_DIR`` set) and only on rank 0, the first forward of each trial
appends a line to the file ``$AUTOSHARD_TEST_TRIAL_COUNTER`` and, by the count before it:

* mode ``sequence`` (default): trial 1 hangs, trial 2 raises torch's CUDA out-of-memory error, later trials
  train normally;
* mode ``user_error``: every trial's forward raises ``ValueError`` (a bug in the user's code).

Planning traces the model in the tuner's own process, where nothing misbehaves.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

WIDTH = 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(WIDTH, 1)
        self.started = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.started:
            self.started = True
            _misbehave()
        for block in self.blocks:
            x = block(x)
        return self.head(x).pow(2).mean()


def _misbehave() -> None:
    counter = os.environ.get("AUTOSHARD_TEST_TRIAL_COUNTER")
    if counter is None or "AUTOSHARD_RUN_DIR" not in os.environ:
        return
    if os.environ.get("AUTOSHARD_TEST_MODE") == "user_error":
        raise ValueError("injected bug in the user's forward")
    if os.environ.get("RANK") != "0":
        return
    with open(counter, "a+", encoding="utf-8") as f:
        f.seek(0)
        before = len(f.read().splitlines())
        f.write("trial\n")
    if before == 0:
        time.sleep(3600)
    elif before == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (injected by the test model)")


def model() -> nn.Module:
    return Net()


def batch(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, WIDTH)
