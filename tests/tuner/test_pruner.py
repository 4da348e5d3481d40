"""Pruning trials clearly slower than the best, in a real in-memory Optuna study."""

from __future__ import annotations

import optuna
import pytest

from autoshard.tuner.pruner import SlowerThanBestPruner, best_throughput

optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_with(*completed: tuple[float, bool]) -> optuna.Study:
    """A maximising study with the pruner (ratio 0.5, min_steps 2) and completed trials ``(value, feasible)``;
    an infeasible one is recorded as ``tune`` records an out-of-memory trial (a violated ``oom`` constraint)."""
    study = optuna.create_study(direction="maximize", pruner=SlowerThanBestPruner(ratio=0.5, min_steps=2))
    for value, feasible in completed:
        trial = study.ask()
        trial.set_constraint("oom", 0.0 if feasible else 1.0)
        study.tell(trial, value)
    return study


def prunes_after(study: optuna.Study, rates: list[float]) -> list[bool]:
    """``should_prune`` of a new trial after it reports each rate (at steps 3, 4, ...: after a warm-up)."""
    trial = study.ask()
    out = []
    for step, rate in enumerate(rates, start=3):
        trial.report(rate, step)
        out.append(trial.should_prune())
    return out


@pytest.mark.parametrize(
    ("completed", "rates", "expected"),
    [
        ([(100.0, True)], [10.0, 10.0, 10.0], [False, True, True]),  # not before min_steps reports
        ([(100.0, True)], [49.0, 49.0], [False, True]),
        ([(100.0, True)], [50.0, 50.0, 60.0], [False, False, False]),  # exactly half is not "below half"
        ([(100.0, True)], [10.0, 80.0], [False, False]),  # judged on the latest rate
        ([(100.0, True)], [80.0, 10.0], [False, True]),
        ([(100.0, True), (300.0, True)], [120.0, 120.0], [False, True]),  # against the best, not the first
        ([], [1.0, 1.0, 1.0], [False, False, False]),  # nothing to compare with
        ([(0.0, False)], [1.0, 1.0], [False, False]),  # an out-of-memory trial is not a best
        ([(1000.0, False), (100.0, True)], [60.0, 60.0], [False, False]),  # even with a high value
        ([(1000.0, False)], [1.0, 1.0], [False, False]),
    ],
)
def test_prunes_only_when_clearly_slower_than_the_best_feasible_trial(
        completed: list[tuple[float, bool]], rates: list[float], expected: list[bool]) -> None:
    assert prunes_after(study_with(*completed), rates) == expected


def test_failed_pruned_and_running_trials_are_not_a_best() -> None:
    study = study_with()
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    pruned = study.ask()
    pruned.report(500.0, 3)
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    study.ask().report(900.0, 3)  # still running
    assert best_throughput(study) is None
    assert prunes_after(study, [1.0, 1.0]) == [False, False]


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.5, 1.5])
def test_a_ratio_outside_zero_one_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match="ratio must be in"):
        SlowerThanBestPruner(ratio=ratio)


@pytest.mark.parametrize("min_steps", [0, -1])
def test_min_steps_below_one_is_refused(min_steps: int) -> None:
    with pytest.raises(ValueError, match="min_steps must be >= 1"):
        SlowerThanBestPruner(min_steps=min_steps)


def test_only_trials_of_the_given_strategies_are_a_best() -> None:
    study = optuna.create_study(direction="maximize",
                                pruner=SlowerThanBestPruner(min_steps=2, strategies=["deepspeed_stage_1"]))
    done = study.ask()
    done.set_user_attr("config", {"strategy": "ddp"})
    done.set_constraint("oom", 0.0)
    study.tell(done, 1000.0)
    assert best_throughput(study) == 1000.0 and best_throughput(study, ["deepspeed_stage_1"]) is None
    assert prunes_after(study, [1.0, 1.0]) == [False, False]
