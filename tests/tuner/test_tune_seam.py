"""``tune(space=..., runner=...)``: the search space and the trial runner can be given, so a benchmark can replay
recorded measurements through the real study, sampler, pruner and records without private names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import autoshard
from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan
from autoshard.tuner.space import SearchSpace, StrategySpace

from .standin import DDP_SPACE, replay

ARGS: dict[str, Any] = {"processes": 2, "seq_len": 32, "precision": "32-true", "steps": 5, "warmup_steps": 2,
                        "progress": False, "use_cache": False, "prune": False}


def test_a_stand_in_runner_and_a_given_space_drive_the_real_study(tmp_path: Path) -> None:
    calls: list[ExportedPlan] = []
    result = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=DDP_SPACE, runner=replay(calls), **ARGS)
    assert {e.strategy for e in calls} == {"ddp"}
    assert {e.micro_batch_size for e in calls} == {1, 2}
    assert result.best_plan is not None and result.best_plan.micro_batch_size == 2
    assert not (tmp_path / "trials").exists() or not any((tmp_path / "trials").iterdir()), "nothing ran for real"


def test_a_space_of_strategies_the_plan_does_not_hold_is_refused(tmp_path: Path) -> None:
    space = SearchSpace(strategies=(StrategySpace(strategy="nonsense", family="ddp", micro_batch_sizes=(1,),
                                                  checkpointing=(False,), knobs=(), default_micro_batch_size=1,
                                                  default_checkpointing=False),))
    with pytest.raises(UsageError, match="not among the plan's"):
        autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=space, **ARGS)
