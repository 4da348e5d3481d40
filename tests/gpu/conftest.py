"""What every GPU test needs: a CUDA device (and NCCL), or a skip that says why."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist


@pytest.fixture
def cuda() -> torch.device:
    """The first CUDA device; skips the test, with the reason, where there is none."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    torch.cuda.empty_cache()
    return torch.device("cuda", 0)


@pytest.fixture
def nccl(cuda: torch.device) -> torch.device:
    """A CUDA device with NCCL built into torch; skips otherwise."""
    if not dist.is_nccl_available():
        pytest.skip("needs NCCL: torch.distributed.is_nccl_available() is False in this torch build")
    return cuda
