"""A hybrid plan launched with another node layout: torchrun started 1 node of 2 where the plan is 2 nodes of 1,
and fit() trained with a (2, 1) mesh whose sharding groups crossed the run's nodes, without a word (a multi-node
probe). Only the world size was checked."""

from __future__ import annotations

import pytest

import autoshard
from autoshard.errors import UsageError
from autoshard.planner.plan_file import ModelFingerprint, from_plan
from autoshard.runtime.plan_checks import RunShape, check


@pytest.fixture(scope="module")
def plans() -> dict[str, object]:
    hardware = autoshard.load_hardware("h100-sxm-80gb", gpus=1, nodes=2)
    return {name: from_plan(autoshard.recommend("tiny-gpt2", hardware=hardware, seq_len=16, strategies=[name]))
            for name in ("fsdp_hybrid", "fsdp")}


def _run(layout: tuple[int, int] | None) -> RunShape:
    return RunShape(world_size=2, device_type="cuda", gpu=None, layout=layout)


def _model(exported: object) -> ModelFingerprint:
    return exported.model  # type: ignore[attr-defined,no-any-return]


def test_a_hybrid_plan_launched_with_another_layout_is_refused_unless_forced(plans: dict[str, object]) -> None:
    hybrid = plans["fsdp_hybrid"]
    with pytest.raises(UsageError) as info:
        check(hybrid, _model(hybrid), _run((1, 2)), source="plan.json", force=False)  # type: ignore[arg-type]
    assert ("it is for 2 node(s) of 1 rank(s) and the launcher started 1 of 2 (WORLD_SIZE / LOCAL_WORLD_SIZE): "
            "fsdp_hybrid shards within each node of its plan") in info.value.message
    forced = check(hybrid, _model(hybrid), _run((1, 2)), source="plan.json", force=True)  # type: ignore[arg-type]
    assert len(forced) == 1
    assert check(hybrid, _model(hybrid), _run((2, 1)), source="plan.json", force=False) == []  # type: ignore[arg-type]


def test_other_strategies_train_on_any_layout_of_their_world_size(plans: dict[str, object]) -> None:
    fsdp = plans["fsdp"]
    assert check(fsdp, _model(fsdp), _run((1, 2)), source="plan.json", force=False) == []  # type: ignore[arg-type]
