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


def _interrupted_elsewhere(storage: str, micro_batch_size: int) -> int:
    """What another tuner of a shared study leaves when Ctrl-C stops it mid-trial: the trial failed as interrupted,
    with its configuration. Returns its number."""
    import optuna

    study = optuna.load_study(study_name="team", storage=storage)
    trial = study.ask()
    trial.set_user_attr("config", {"strategy": "ddp", "micro_batch_size": micro_batch_size,
                                   "activation_checkpointing": False, "settings": {}})
    trial.set_user_attr("failure", "interrupted")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return trial.number


def test_a_trial_another_tuner_left_interrupted_runs_again_here_and_one_the_budget_leaves_is_said(
        tmp_path: Path) -> None:
    # Two tuners on one study: the one stopped mid-trial had its configuration queued again only where it was
    # resumed; the other filled the budget without it, and the resumed one said it "runs again first" and ran
    # nothing (team-tuning probe)
    storage = f"sqlite:///{tmp_path / 'team.db'}"
    left: list[int] = []
    calls: list[ExportedPlan] = []
    measure = replay(calls)

    def runner(exported: ExportedPlan, *args: Any, **kwargs: Any) -> Any:
        if not left:
            left.append(_interrupted_elsewhere(storage, 2))
        return measure(exported, *args, **kwargs)

    kwargs = {**ARGS, "storage": storage, "study_name": "team", "space": DDP_SPACE}
    result = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path / "b", runner=runner, **kwargs)
    (rerun,) = [t for t in result.trials if t.rerun_of == left[0]]
    assert rerun.state == "complete" and rerun.config is not None and rerun.config.micro_batch_size == 2
    assert f"Trial {left[0]} was stopped before it finished (interrupted) in another tuner" in " ".join(result.notes)
    again = _interrupted_elsewhere(storage, 1)
    spent = autoshard.tune("tiny-gpt2", trials=2, output_dir=tmp_path / "c", runner=replay([]), **kwargs)
    assert (f"Trial {again}'s configuration, queued to run again, did not run: the budget (2 trial(s)) was spent "
            "first; a larger --trials runs it.") in spent.notes
