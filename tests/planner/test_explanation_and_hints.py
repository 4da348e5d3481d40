"""The explanation argues for the pick, and the hints say only what would help."""

from __future__ import annotations

import pytest

from autoshard.errors import NoFeasiblePlan
from autoshard.planner import plan
from tests.planner.test_planner import H100x8, Synthetic, request, workload


def test_explanation_does_not_argue_for_keeping_parameters_whole_when_full_sharding_wins():
    # full sharding is discounted by pretrain-least-communication (shard_grad_op fits) yet predicted 50 % faster
    strategies = [Synthetic("fsdp_shard_grad_op", state_gib=40, act_gib=2, per_device_samples_s=100),
                  Synthetic("fsdp", state_gib=40, act_gib=2, per_device_samples_s=150, sharded=True)]
    p = plan(workload(3_000_000_000), H100x8, request(micro_batch_size=4, goal="pretrain"), strategies)
    assert p.recommended.strategy == "fsdp"
    assert any("pretrain-least-communication" in r for r in p.recommended.reasons)  # kept for the candidate
    text = " ".join(p.explanation)
    assert "keeps parameters whole" not in text and "communicates less" not in text
    assert "leads even after the pretrain-least-communication discount" in text


@pytest.mark.parametrize(("ds_installed", "says_install"), [(True, False), (False, True)])
def test_nothing_fits_hint_says_install_deepspeed_only_when_it_is_missing(ds_installed, says_install):
    missing = None if ds_installed else "deepspeed_stage_3_offload needs DeepSpeed, which is not installed " \
                                        "(pip install deepspeed)."
    strategies = [Synthetic("fsdp", state_gib=5000, act_gib=1, per_device_samples_s=10, sharded=True),
                  Synthetic("deepspeed_stage_3_offload", state_gib=5000, act_gib=1, per_device_samples_s=10,
                            sharded=True, unsupported=missing)]
    with pytest.raises(NoFeasiblePlan) as info:
        plan(workload(), H100x8, request(micro_batch_size=1), strategies)
    assert ("install deepspeed" in (info.value.hint or "")) is says_install
