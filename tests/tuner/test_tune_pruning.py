"""Pruning compares a trial with trials it competes with, and never throws a finished trial's measurement away:
a study resumed with other ``--strategies`` pruned every new trial against the old strategies' best, at its last
step too, and ended with "No trial completed" (real Optuna studies, stand-in trials that report progress)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import autoshard
from autoshard.planner.plan_file import ExportedPlan
from autoshard.tuner import TrialState
from autoshard.tuner.runner import Measurement, TrialRunner, TrialSpec
from autoshard.tuner.space import SearchSpace

from .standin import DDP_SPACE, replay
from .test_tune_other_strategies import ARGS, ZERO1_SPACE

PRUNING = {**ARGS, "prune": True}  # steps 5, warm-up 2: progress at steps 3, 4, 5


def reporting(rates: dict[str, list[float]]) -> TrialRunner:
    """DDP measures 200 samples/s without reporting; another strategy reports ``rates[strategy]`` at steps 3, 4, 5
    (as rank 0's progress arrives) and measures the last of them."""
    def run(exported: ExportedPlan, spec: TrialSpec, run_dir: Path, *, on_progress: Any = None,
            **_: Any) -> Measurement:
        reported = rates.get(exported.strategy, [200.0])
        for step, rate in enumerate(reported, start=spec.warmup_steps + 1):
            if on_progress is not None:
                on_progress(step, rate)
        return Measurement(samples_per_s=reported[-1], tokens_per_s=None, step_time_s=1.0, peak_memory_bytes=None,
                           peak_memory_kind=None, step_times_s=(1.0,) * spec.steps)
    return run


def test_a_study_resumed_with_other_strategies_prunes_them_only_against_each_other(tmp_path: Path) -> None:
    autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=DDP_SPACE, runner=replay([]), **PRUNING)
    again = autoshard.tune("tiny-gpt2", trials=1, output_dir=tmp_path, space=ZERO1_SPACE,
                           runner=reporting({"deepspeed_stage_1": [10.0, 10.0, 10.0]}), **PRUNING)
    zero1 = [t for t in again.trials if t.config is not None and t.config.strategy == "deepspeed_stage_1"]
    assert [t.state for t in zero1] == [TrialState.COMPLETE], [t.to_dict() for t in again.trials]
    assert again.best is zero1[0] and again.best_plan is not None


def test_a_trial_slow_only_at_its_last_step_is_measured_not_pruned(tmp_path: Path) -> None:
    both = SearchSpace(strategies=(*DDP_SPACE.strategies, *ZERO1_SPACE.strategies))
    result = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path, space=both,
                            runner=reporting({"deepspeed_stage_1": [150.0, 150.0, 10.0]}), **PRUNING)
    zero1 = [t for t in result.trials if t.config is not None and t.config.strategy == "deepspeed_stage_1"]
    assert [t.state for t in zero1] == [TrialState.COMPLETE], [t.to_dict() for t in result.trials]
    assert zero1[0].samples_per_s == 10.0
