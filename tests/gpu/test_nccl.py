"""NCCL at one rank: the process group every autoshard GPU run joins first."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.gpu


def test_nccl_world_of_one_runs_the_collectives_fsdp_and_ddp_use(nccl: torch.device, tmp_path: Path) -> None:
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            device_id=nccl)
    try:
        assert dist.get_backend() == "nccl"
        x = torch.arange(6, dtype=torch.float32, device=nccl)
        dist.all_reduce(x)  # DDP's gradient reduction
        torch.cuda.synchronize(nccl)
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        gathered = torch.empty(6, device=nccl)
        dist.all_gather_into_tensor(gathered, x)  # FSDP2's parameter all-gather
        scattered = torch.empty(6, device=nccl)
        dist.reduce_scatter_tensor(scattered, gathered * 2)  # FSDP2's gradient reduce-scatter
        torch.cuda.synchronize(nccl)
        assert torch.equal(gathered, x) and torch.equal(scattered, x * 2)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()
