"""A small model file whose trials misbehave as the environment says, inside trial workers only (planning traces
the model in the tuner's own process, where nothing happens):

* ``$AUTOSHARD_TEST_OOM_FROM``: at that micro-batch or more, the forward runs out of memory for real: it asks
  torch's CPU allocator for more bytes than any machine has (2**48 per sample), and the allocator refuses
  ("DefaultCPUAllocator: can't allocate memory"), as it does when a batch does not fit
  (tests/tuner/test_tune_oom.py);
* ``$AUTOSHARD_TEST_FORWARD_SLEEP_S``: each forward takes that long (tests/tuner/test_tune_timeout.py);
* ``$AUTOSHARD_TEST_RAISE``: the forward raises ``ValueError`` with that text, a bug in the user's code
  (tests/tuner/test_tune_best_dir.py).
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

WIDTH = 16


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        oom_from = os.environ.get("AUTOSHARD_TEST_OOM_FROM")
        if "AUTOSHARD_RUN_DIR" in os.environ and oom_from is not None and x.shape[0] >= int(oom_from):
            torch.empty(x.shape[0] << 48, dtype=torch.uint8)
        if "AUTOSHARD_RUN_DIR" in os.environ:
            time.sleep(float(os.environ.get("AUTOSHARD_TEST_FORWARD_SLEEP_S", "0")))
            if "AUTOSHARD_TEST_RAISE" in os.environ:
                raise ValueError(os.environ["AUTOSHARD_TEST_RAISE"])
        return self.head(torch.relu(self.fc(x)))


def model() -> nn.Module:
    return Net()


def batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, WIDTH), torch.randn(batch_size, 1)


def loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output, batch[1])
