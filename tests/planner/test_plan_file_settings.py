"""plan.json keeps the settings published runs use (issue #16); files written before them still load."""

from __future__ import annotations

import dataclasses
import json

import pytest

from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint, ModelFingerprint, dumps, loads

PLAN = ExportedPlan(
    strategy="ddp", family="ddp", micro_batch_size=2, gradient_accumulation=1, activation_checkpointing=False,
    settings={"bucket_cap_mb": 25, "find_unused_parameters": False}, precision="bf16-mixed", optimizer="adamw",
    seq_len=64,
    model=ModelFingerprint(name="m", parameter_count=10, block_class=None, layout_hash="0" * 16),
    hardware=HardwareFingerprint(gpu="h100", gpu_memory_bytes=80, gpus_per_node=8, nodes=1, device_type="cuda",
                                 backend="nccl", nvme_path=None))


@pytest.mark.parametrize("impl", [None, "foreach", "for-loop", "fused"])
def test_optimizer_implementation_round_trips(impl: str | None) -> None:
    plan = dataclasses.replace(PLAN, optimizer_impl=impl)
    assert loads(dumps(plan)).optimizer_impl == impl


def test_a_plan_written_before_the_setting_loads_with_torchs_default() -> None:
    data = json.loads(dumps(PLAN))
    del data["optimizer_impl"]
    assert loads(json.dumps(data)).optimizer_impl is None


def test_a_mistyped_setting_is_refused() -> None:
    data = json.loads(dumps(PLAN))
    data["optimizer_impl"] = 3
    with pytest.raises(UsageError, match="optimizer_impl"):
        loads(json.dumps(data))
