"""``--nvme PATH`` with a profile names a directory on the profiled machine (a probe's renter got this laptop's
free space, or a refusal because the rented machine's path did not exist here)."""

from __future__ import annotations

import dataclasses

import pytest

import autoshard
from autoshard.errors import NoFeasiblePlan
from autoshard.hardware import NVMeDevice, load_hardware


def test_nvme_offload_on_a_profile_without_disks_is_planned_not_refused_for_want_of_room() -> None:
    hw = load_hardware("l4", nvme="/mnt/nvme")
    plan = autoshard.recommend("tiny-gpt2", hardware=hw, seq_len=32, strategies=["deepspeed_stage_3_offload_nvme"])
    assert plan.recommended is not None and plan.recommended.strategy == "deepspeed_stage_3_offload_nvme"


def test_a_known_disk_still_bounds_nvme_offload() -> None:
    hw = load_hardware("l4", nvme="/mnt/nvme")
    tiny = NVMeDevice(path="/mnt/nvme", total_bytes=1024, free_bytes=1024, origin="profile")
    hw = dataclasses.replace(hw, node=dataclasses.replace(hw.node, nvme=(tiny,)))
    with pytest.raises(NoFeasiblePlan, match="of NVMe per node"):
        autoshard.recommend("tiny-gpt2", hardware=hw, seq_len=32, strategies=["deepspeed_stage_3_offload_nvme"])
