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


@pytest.mark.parametrize(("plan", "message"), [
    ({"settings": {"bucket_cap_mb": "lots"}}, r"bucket_cap_mb must be a number, but got 'lots'"),  # int() in export
    ({"settings": {"bucket_cap_mb": "25"}}, r"bucket_cap_mb must be a number, but got '25'"),  # DDP's own error
    ({"strategy": "fsdp", "family": "fsdp", "settings": {"reduce_dtype": "fp64"}},
     r"reduce_dtype must be one of 'fp32', 'bf16', but got 'fp64'"),  # a KeyError in the export
    ({"settings": {"bucket_size": 25}}, r"bucket_size is not a setting of ddp \(its settings: bucket_cap_mb, "),
    ({"optimizer": "lion"}, r"unknown optimizer 'lion'"),
    ({"hardware": {"device_type": "tpu"}}, r"device_type must be 'cuda' or 'cpu', but got 'tpu'"),
    ({"precision": "fp8"}, r"precision 'fp8' is not one of 32-true, 16-mixed, bf16-mixed, bf16-true"),  # KeyError
])
def test_a_hand_edited_plan_with_values_autoshard_cannot_train_is_refused_when_read(plan: dict, message: str) -> None:
    # autoshard export said "internal error: KeyError: 'fp64'", or wrote bucket_cap_mb='25' for DDP to refuse
    data = json.loads(dumps(PLAN))
    if "strategy" in plan:
        del data["traits"]  # the strategy's own are taken
    for key, value in plan.items():
        data[key] = {**data[key], **value} if key == "hardware" else value
    with pytest.raises(UsageError, match=message):
        loads(json.dumps(data))


def test_a_partial_reshard_and_the_nvme_sizes_are_whole_numbers_whatever_the_hardware_allows() -> None:
    fsdp = dataclasses.replace(PLAN, strategy="fsdp", family="fsdp", traits=None,
                               settings={"reshard_after_forward": 4, "reduce_dtype": "bf16"})
    assert loads(dumps(fsdp)).settings["reshard_after_forward"] == 4
    with pytest.raises(UsageError, match="reshard_after_forward must be True, False or a whole number"):
        dataclasses.replace(fsdp, settings={"reshard_after_forward": "yes"})


def test_a_plan_json_edited_to_another_strategy_is_told_what_to_delete() -> None:
    """A ZeRO-2 plan.json whose strategy was edited to ddp was answered with the Traits reprs and "Pass
    traits=None", which `autoshard export` cannot take (the bad-input probe)."""
    data = json.loads(dumps(dataclasses.replace(PLAN, strategy="deepspeed_stage_2", family="deepspeed", settings={},
                                                traits=None)))
    data.update(strategy="ddp", family="ddp")
    with pytest.raises(UsageError, match=r"the plan's traits are not those of its strategy ddp: family 'deepspeed' "
                                         r"\(the strategy's 'ddp'\), zero_stage 2 \(the strategy's 0\)") as refused:
        loads(json.dumps(data))
    assert "Traits(" not in refused.value.message and 'delete its "traits"' in str(refused.value.hint)


def test_a_plan_json_missing_a_block_says_it_is_missing() -> None:
    """``"hardware" must be an object, but got NoneType`` meant the key was not there (the bad-input probe)."""
    data = json.loads(dumps(PLAN))
    del data["hardware"]
    with pytest.raises(UsageError, match=r'has no "hardware"') as refused:
        loads(json.dumps(data))
    assert "NoneType" not in refused.value.message and "Export the plan again" in str(refused.value.hint)
