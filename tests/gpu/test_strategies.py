"""autoshard's own backends on one GPU: DDP's bf16 compression hook, and FSDP2 at one rank."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

import autoshard

pytestmark = pytest.mark.gpu


def _train_with_hook(device: torch.device, hook: str, store: Path) -> list[float]:
    """Three SGD steps of a small MLP wrapped in DistributedDataParallel at one NCCL rank, with the comm hook
    registered by autoshard's DDP backend. ``fit()`` cannot show the hook on one GPU: it trains one device
    unwrapped (as accelerate and Lightning do), and NCCL refuses two ranks on one GPU."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from autoshard.strategies.ddp.backend import DDPBackend

    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1, device_id=device)
    try:
        torch.manual_seed(0)
        module = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 1)).to(device)
        ddp = DistributedDataParallel(module, device_ids=[device.index])
        backend = DDPBackend.__new__(DDPBackend)  # only its hook registration is used
        backend.settings = {}
        backend._register_hook(ddp, hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
        generator = torch.Generator(device="cpu").manual_seed(1)
        losses = []
        for _ in range(3):
            x = torch.randn(32, 64, generator=generator).to(device)
            loss = ddp(x).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        return losses
    finally:
        dist.destroy_process_group()


def test_ddp_bf16_compress_hook_trains_and_rounds_the_reduced_gradients(nccl: torch.device, tmp_path: Path) -> None:
    plain = _train_with_hook(nccl, "none", tmp_path / "plain")
    rounded = _train_with_hook(nccl, "bf16_compress", tmp_path / "bf16")
    assert all(math.isfinite(loss) for loss in plain + rounded)
    # Same seed, same batches: the first forward is the same; the hook's bf16 gradients change the updates.
    assert rounded[0] == plain[0]
    assert rounded[1:] != plain[1:]
    assert rounded[2] == pytest.approx(plain[2], rel=1e-2)


def test_fsdp2_one_rank_step_shards_and_trains(cuda: torch.device) -> None:
    result = autoshard.fit("tiny-gpt2", strategy="fsdp", processes=1, max_steps=3, batch_size=4, seq_len=64,
                           precision="bf16-mixed", log_every=1)
    assert result.plan.strategy == "fsdp" and result.plan.hardware.device_type == "cuda"
    assert all(math.isfinite(loss) for loss in result.losses)
    assert all(s.peak_memory_bytes and s.peak_memory_bytes > 0 for s in result.steps)
    assert result.model is not None
    assert all(isinstance(p, DTensor) for p in result.model.parameters())
