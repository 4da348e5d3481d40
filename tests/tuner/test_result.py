"""The typed results of ``tune``: a trial's memory error, counts by state, the JSON form, the config key."""

from __future__ import annotations

import json

import pytest

from autoshard.tuner.result import (
    FailureClass,
    TrialConfig,
    TrialRecord,
    TrialState,
    TuneResult,
)

from .standin import DDP_SPACE

GIB = 2**30
DDP = TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=False,
                  settings={"bucket_cap_mb": 25.0, "comm_hook": "powersgd", "matrix_approximation_rank": 2})


@pytest.mark.parametrize(
    ("predicted", "measured", "expected"),
    [
        (12 * GIB, 10 * GIB, 0.2),  # over-predicted by a fifth
        (8 * GIB, 10 * GIB, -0.2),
        (10 * GIB, 10 * GIB, 0.0),
        (0, 10 * GIB, -1.0),
        (None, 10 * GIB, None),
        (10 * GIB, None, None),
        (10 * GIB, 0, None),  # nothing measured: no ratio to a zero
    ],
)
def test_memory_error_is_relative_to_the_measurement(predicted: int | None, measured: int | None,
                                                     expected: float | None) -> None:
    record = TrialRecord(number=0, state=TrialState.COMPLETE, config=DDP, predicted_peak_bytes=predicted,
                         peak_memory_bytes=measured, peak_memory_kind="cuda_allocated")
    assert record.memory_error == (None if expected is None else pytest.approx(expected))
    assert record.to_dict()["memory_error"] == record.memory_error


def test_memory_error_is_not_computed_against_host_rss() -> None:
    # A CPU trial's resident-set growth holds the framework's own memory too: not comparable to the prediction.
    record = TrialRecord(number=0, state=TrialState.COMPLETE, config=DDP, predicted_peak_bytes=12 * GIB,
                         peak_memory_bytes=10 * GIB, peak_memory_kind="host_rss")
    assert record.memory_error is None


def trials() -> tuple[TrialRecord, ...]:
    return (
        TrialRecord(number=0, state=TrialState.COMPLETE, config=DDP, samples_per_s=410.5, tokens_per_s=13136.0,
                    step_time_s=0.02, peak_memory_bytes=3 * GIB, peak_memory_kind="cuda_allocated",
                    predicted_peak_bytes=int(3.2 * GIB), predicted_samples_per_s=500.0, duration_s=21.0),
        TrialRecord(number=1, state=TrialState.INFEASIBLE, config=DDP, failure=FailureClass.OOM,
                    message="rank 0: OutOfMemoryError: CUDA out of memory."),
        TrialRecord(number=2, state=TrialState.INFEASIBLE, config=DDP, failure=FailureClass.PREDICTED_OOM),
        TrialRecord(number=3, state=TrialState.FAILED, config=None, failure=FailureClass.STALE),
        TrialRecord(number=4, state=TrialState.COMPLETE, config=DDP, samples_per_s=400.0, cached=True),
        TrialRecord(number=5, state=TrialState.PRUNED, config=DDP, samples_per_s=90.0),
        TrialRecord(number=6, state=TrialState.RUNNING, config=DDP),
    )


def test_counts_are_by_state() -> None:
    result = TuneResult(study_name="s", storage="sqlite:///x", output_dir="x", trials=trials(), best=None,
                        best_plan=None)
    assert result.counts() == {"complete": 2, "infeasible": 2, "failed": 1, "pruned": 1, "running": 1}


def test_its_repr_is_one_line_with_the_best_trial() -> None:
    records = trials()
    result = TuneResult(study_name="s", storage="sqlite:///x", output_dir="/out", trials=records, best=records[0],
                        best_plan=None)
    shown = repr(result)
    assert "\n" not in shown and len(shown) < 200, shown
    assert shown.startswith("<TuneResult 's': 7 trials (2 complete, 2 infeasible, 1 failed, 1 pruned, 1 running); "
                            f"best trial 0, {records[0].config.strategy} at micro-batch")


def test_to_dict_survives_a_json_round_trip() -> None:
    records = trials()
    result = TuneResult(study_name="tune-gpt2", storage="postgresql://u:***@db/s", output_dir="/out",
                        trials=records, best=records[0], best_plan=None, planner_trial=0,
                        exported=("/out/plan.json",), notes=("2 trials were predicted not to fit.",))
    data = result.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["best"]["config"]["settings"] == DDP.settings
    assert [t["state"] for t in data["trials"]] == [t.state.value for t in records]
    assert data["trials"][3]["config"] is None and data["trials"][3]["failure"] == "stale"
    assert data["counts"] == result.counts()


@pytest.mark.parametrize("other", [
    TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=False,
                settings={"matrix_approximation_rank": 2, "comm_hook": "powersgd", "bucket_cap_mb": 25.0}),
    TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=False,
                settings={"comm_hook": "powersgd", "bucket_cap_mb": 25.0, "matrix_approximation_rank": 2}),
])
def test_config_key_ignores_settings_order(other: TrialConfig) -> None:
    assert other.key() == DDP.key()


def test_config_key_tells_configs_apart() -> None:
    keys = {DDP.key(),
            TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=True, settings=DDP.settings).key(),
            TrialConfig(strategy="ddp", micro_batch_size=8, activation_checkpointing=False, settings=DDP.settings).key(),
            TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=False,
                        settings={**DDP.settings, "matrix_approximation_rank": 4}).key()}
    assert len(keys) == 4


def test_the_budget_counts_only_trials_that_cost_a_run() -> None:
    # Predicted-infeasible, repeated, stale and interrupted trials cost no run: they do not use up --trials.
    import optuna

    from autoshard.tuner.loop import StudyLoop

    study = optuna.create_study(direction="maximize")
    for attrs in ({}, {"failure": "predicted_oom"}, {"duplicate_of": 0}, {"failure": "stale"}, {"failure": "oom"},
                  {"cached": True}, {"failure": "interrupted"}):
        trial = study.ask()
        for key, value in {"config": DDP.to_dict(), **attrs}.items():
            trial.set_user_attr(key, value)
        study.tell(trial, 1.0)
    loop = StudyLoop.__new__(StudyLoop)  # only the study, the space and the owner are needed to count
    loop.study, loop.me = study, {"host": "here", "pid": 1, "started": 0.0}
    loop.space = DDP_SPACE
    assert loop._counted() == 3
    other = study.ask()  # a trial another tuner is running counts; one of this tuner's own does not
    other.set_user_attr("autoshard_owner", {"host": "elsewhere", "pid": 2, "started": 0.0})
    mine = study.ask()
    mine.set_user_attr("autoshard_owner", loop.me)
    assert loop._counted() == 4


def test_an_interrupted_study_says_what_it_kept_where_a_python_traceback_shows_it() -> None:
    from autoshard.tuner.loop import Interrupted

    result = TuneResult(study_name="s", storage="sqlite:///x", output_dir="out", trials=trials(), best=None,
                        best_plan=None)
    stopped = Interrupted(result)
    assert isinstance(stopped, KeyboardInterrupt) and stopped.result is result
    assert str(stopped) == ("tuning interrupted; 7 trials recorded in out (summary.md), and the same call resumes "
                            "the study")
