"""A study resumed with other strategies (``--strategies``, ``--top``) runs them and picks its best among them: it
resumed silently before, ran nothing (the old trials used up ``--trials``) and exported the old strategy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import autoshard
from autoshard.planner.plan_file import ExportedPlan
from autoshard.tuner.space import SearchSpace, StrategySpace

from .standin import DDP_SPACE, replay

ARGS: dict[str, Any] = {"processes": 2, "seq_len": 32, "precision": "32-true", "steps": 5, "warmup_steps": 2,
                        "progress": False, "use_cache": False, "prune": False}
ZERO1_SPACE = SearchSpace(strategies=(StrategySpace(strategy="deepspeed_stage_1", family="deepspeed",
                                                    micro_batch_sizes=(1,), checkpointing=(False,), knobs=(),
                                                    default_micro_batch_size=1, default_checkpointing=False),))


def test_a_study_resumed_with_other_strategies_runs_and_picks_among_them(tmp_path: Path) -> None:
    calls: list[ExportedPlan] = []
    first = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=DDP_SPACE, runner=replay(calls), **ARGS)
    assert first.best_plan is not None and first.best_plan.strategy == "ddp"
    calls.clear()
    again = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=ZERO1_SPACE, runner=replay(calls),
                           **ARGS)
    assert [c.strategy for c in calls] == ["deepspeed_stage_1"]  # its planner trial; a repeat costs nothing
    # the replayed DDP trial at micro-batch 2 measured faster, but it is not what this run asked for
    assert again.best_plan is not None and again.best_plan.strategy == "deepspeed_stage_1"
    assert again.best is not None and again.best.config is not None
    assert again.planner_trial == again.best.number
    assert any("holds trials of ddp, outside this run's strategies (deepspeed_stage_1)" in n for n in again.notes)
    assert '"strategy": "deepspeed_stage_1"' in (tmp_path / "best" / "plan.json").read_text(encoding="utf-8")
