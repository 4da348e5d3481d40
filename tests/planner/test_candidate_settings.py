"""``recommend --json`` gives every candidate's settings in force, what it was priced with: the recommended one's are
exactly what ``plan.json`` writes (``plan_file.from_plan``). Before, ``settings`` held only the request's own values,
``{}`` for a plain ``recommend``, while ``plan.json`` from the same command held every bucket size (a probe found it).
"""

from __future__ import annotations

import json

import autoshard
from autoshard.planner import plan_file
from autoshard.strategies import get


def test_each_candidate_carries_its_strategys_settings_and_the_recommended_ones_are_plan_json_s() -> None:
    plan = autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=64, reduce_dtype="bf16")
    out = json.loads(json.dumps(plan.to_dict()))
    assert out["recommended"]["settings"] == plan_file.from_plan(plan).settings
    strategies = set()
    for c in out["candidates"]:
        knobs = {k.name for k in get(c["strategy"]).knobs(plan.hardware)}
        assert set(c["settings"]) == knobs, c["strategy"]
        if "reduce_dtype" in knobs:
            assert c["settings"]["reduce_dtype"] == "bf16"  # the request's value, not the default
        strategies.add(c["strategy"])
    assert {"ddp", "fsdp", "deepspeed_stage_3"} <= strategies
