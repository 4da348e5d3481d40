"""autoshard's own backends on one GPU: DDP with a bf16 compression hook, and FSDP2 at one rank."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.distributed.tensor import DTensor

import autoshard
from autoshard.hardware import detect_hardware
from autoshard.planner import plan_file

pytestmark = pytest.mark.gpu


def _ddp_plan(comm_hook: str) -> plan_file.ExportedPlan:
    plan = autoshard.recommend("tiny-gpt2", hardware=detect_hardware(gpus=1), batch_size=4, seq_len=64,
                               precision="32-true", strategies=["ddp"], optimizer="sgd")
    candidate = dataclasses.replace(plan.recommended.candidate, activation_checkpointing=False,
                                    settings={**plan.recommended.candidate.settings, "comm_hook": comm_hook})
    return plan_file.from_plan(dataclasses.replace(
        plan, recommended=dataclasses.replace(plan.recommended, candidate=candidate)))


def test_ddp_bf16_compress_hook_trains_and_rounds_the_reduced_gradients(nccl: torch.device) -> None:
    runs = {}
    for hook in ("none", "bf16_compress"):
        exported = _ddp_plan(hook)
        assert exported.hardware.backend == "nccl" and exported.settings["comm_hook"] == hook
        result = autoshard.fit("tiny-gpt2", plan=exported, max_steps=3, optimizer="sgd", log_every=1)
        assert all(math.isfinite(loss) for loss in result.losses)
        assert all(s.peak_memory_bytes for s in result.steps)
        runs[hook] = result.losses
    # Same seed, same batches: the first forward is the same; the hook's bf16 gradients change the updates.
    assert runs["bf16_compress"][0] == runs["none"][0]
    assert runs["bf16_compress"][1:] != runs["none"][1:]
    assert runs["bf16_compress"][2] == pytest.approx(runs["none"][2], rel=1e-2)


def test_fsdp2_one_rank_step_shards_and_trains(cuda: torch.device) -> None:
    result = autoshard.fit("tiny-gpt2", strategy="fsdp", processes=1, max_steps=3, batch_size=4, seq_len=64,
                           precision="bf16-mixed", log_every=1)
    assert result.plan.strategy == "fsdp" and result.plan.hardware.device_type == "cuda"
    assert all(math.isfinite(loss) for loss in result.losses)
    assert all(s.peak_memory_bytes and s.peak_memory_bytes > 0 for s in result.steps)
    assert result.model is not None
    assert all(isinstance(p, DTensor) for p in result.model.parameters())
